"""Polaris receipts: in-toto Statement v1 in a DSSE envelope, Ed25519, byte-exact verification."""

import base64
import json
import os
import stat

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from evalbot.report import receipt
from evalbot.errors import ReceiptError
from evalbot.decide.outcome import ScoreOutcome
from evalbot.testing import builders as b
from evalbot.decide.verdict import decide


def outcome(**kw) -> ScoreOutcome:
    m = b.measurements([1.05, 1.06, 1.05])
    fields = dict(
        repo="/r", base_ref="main", head_ref="pr", base_sha="a" * 40, head_sha="b" * 40, harness_ref="main",
        harness_sha="a" * 40, harness_digest="c" * 64, profile="gpu", rounds=3, reps=3, box="box-1",
        verdict=decide(m, b.settings()), measurements=m, started_at="2026-01-01T00:00:00Z",
        finished_at="2026-01-01T00:10:00Z",
    )
    fields.update(kw)
    return ScoreOutcome(**fields)


@pytest.fixture
def keys(tmp_path):
    priv, pub = receipt.generate_keypair(tmp_path / "bot.pem")
    return priv, pub


def test_pae_follows_the_dsse_spec():
    assert receipt.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert receipt.pae("", b"") == b"DSSEv1 0  0 "


def test_statement_shape():
    st = receipt.build_statement(outcome(), {"x": 1})
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["predicateType"] == receipt.PREDICATE_TYPE
    digests = {s["name"]: s["digest"] for s in st["subject"]}
    assert digests["git+head:pr"] == {"gitCommit": "b" * 40}
    assert digests["git+base:main"] == {"gitCommit": "a" * 40}
    assert digests["harness"] == {"sha256": "c" * 64}
    assert digests["model"] == {"sha256": "11" * 32} and "drafter" not in digests  # no drafter tree read
    st = receipt.build_statement(outcome(drafter_tree="d" * 40), {"x": 1})
    digests = {s["name"]: s["digest"] for s in st["subject"]}
    # the drafter subject is the tree the bot read from the candidate commit; the PR process's own report of
    # its drafter's sha256 (22...) stays in the measurements, never a subject
    assert digests["drafter"] == {"gitTree": "d" * 40} and st["predicate"]["code"]["drafter_tree"] == "d" * 40
    assert {"sha256": "22" * 32} not in digests.values()
    p = st["predicate"]
    assert {"environment", "measurements", "gates", "verdict", "timestamps", "method", "code"} <= set(p)
    assert p["verdict"]["tier"] == "S" and p["timestamps"]["finished_at"] == "2026-01-01T00:10:00Z"


def test_sign_and_verify_round_trip(keys, tmp_path):
    priv, pub = keys
    key = receipt.load_private_key(priv)
    env = receipt.make_envelope(receipt.build_statement(outcome(), {}), key)
    assert env["payloadType"] == "application/vnd.in-toto+json"
    assert env["signatures"][0]["keyid"] == receipt.keyid_for(key.public_key())
    path = receipt.write_receipt(tmp_path, outcome(), env)
    statement = receipt.verify_file(path, pub)
    assert statement["subject"][0]["digest"]["gitCommit"] == "b" * 40


def test_every_changed_byte_is_caught(keys):
    priv, pub = keys
    small = {"_type": receipt.STATEMENT_TYPE, "subject": [], "predicateType": receipt.PREDICATE_TYPE, "predicate": {"v": 1}}
    data = receipt.envelope_bytes(receipt.make_envelope(small, receipt.load_private_key(priv)))
    pk = receipt.load_public_key(pub)
    receipt.verify_envelope(data, pk)
    for i in range(len(data)):
        for flip in (0x01, 0x20):
            tampered = bytearray(data)
            tampered[i] ^= flip
            with pytest.raises(ReceiptError):
                receipt.verify_envelope(bytes(tampered), pk)
    with pytest.raises(ReceiptError):
        receipt.verify_envelope(data[:-1], pk)
    with pytest.raises(ReceiptError):
        receipt.verify_envelope(data + b" ", pk)


def test_a_resigned_modified_payload_fails_with_the_trusted_key(keys):
    priv, pub = keys
    st = receipt.build_statement(outcome(), {})
    st["predicate"]["verdict"]["tier"] = "XL"
    forged = receipt.envelope_bytes(receipt.make_envelope(st, Ed25519PrivateKey.generate()))
    with pytest.raises(ReceiptError, match="no signature by this key"):
        receipt.verify_envelope(forged, receipt.load_public_key(pub))


def test_keyid_swapped_to_the_trusted_one_still_fails(keys):
    priv, pub = keys
    trusted = receipt.load_public_key(pub)
    env = receipt.make_envelope(receipt.build_statement(outcome(), {}), Ed25519PrivateKey.generate())
    env["signatures"][0]["keyid"] = receipt.keyid_for(trusted)
    with pytest.raises(ReceiptError, match="signature does not match"):
        receipt.verify_envelope(receipt.envelope_bytes(env), trusted)


def test_unsigned_receipt_is_reported_as_such(keys):
    _, pub = keys
    env = receipt.make_envelope(receipt.build_statement(outcome(), {}), None)
    assert env["signatures"] == []
    with pytest.raises(ReceiptError, match="not signed"):
        receipt.verify_envelope(receipt.envelope_bytes(env), receipt.load_public_key(pub))
    payload = json.loads(base64.b64decode(env["payload"]))
    assert payload["_type"] == receipt.STATEMENT_TYPE  # still collected


def test_keygen_modes_and_refusal_to_overwrite(tmp_path):
    priv, pub = receipt.generate_keypair(tmp_path / "k.pem")
    assert stat.S_IMODE(os.stat(priv).st_mode) == 0o600
    assert pub.name == "k.pem.pub" and b"PUBLIC KEY" in pub.read_bytes()
    with pytest.raises(ReceiptError, match="already exists"):
        receipt.generate_keypair(tmp_path / "k.pem")
    receipt.generate_keypair(tmp_path / "k.pem", force=True)
    with pytest.raises(ReceiptError, match="does not exist"):
        receipt.generate_keypair(tmp_path / "missing" / "k.pem")


def test_bad_key_files(tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    with pytest.raises(ReceiptError, match="not an unencrypted PEM"):
        receipt.load_private_key(bad)
    with pytest.raises(ReceiptError, match="not a PEM public key"):
        receipt.load_public_key(bad)
    with pytest.raises(ReceiptError, match="cannot read"):
        receipt.load_private_key(tmp_path / "none.pem")
