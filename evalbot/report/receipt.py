"""Polaris receipts: an in-toto Statement v1 in a DSSE envelope, signed with Ed25519.

- Statement: `_type` https://in-toto.io/Statement/v1; subjects = head commit, base commit, harness
  tree digest, model sha256 (main's process), and the candidate's shipped drafter directory as the bot read
  it from git (gitTree; schema 3, was the PR process's own sha256 report); predicateType `PREDICATE_TYPE`;
  the predicate holds the environment, method, measurements, gates, verdict and timestamps.
- Envelope (DSSE v1): `payload` = base64 of the canonical statement JSON, `payloadType`
  application/vnd.in-toto+json, `signatures` = [{keyid, sig}], the signature over
  PAE(payloadType, payload) = "DSSEv1 <len> <type> <len> <payload>". No key -> no signatures
  ("collected, not signed").
- keyid = sha256 (hex) of the public key's DER SubjectPublicKeyInfo.
- Files are written canonically (sorted keys, no spaces, one trailing newline), so `verify` can
  insist on byte-exact form: any changed byte is an error, even one a JSON parser would forgive.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from evalbot.decide.outcome import ScoreOutcome
from evalbot.errors import ReceiptError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://dspark-evalbot.dev/polaris/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
RECEIPTS_DIR = "receipts"


# ---------------------------------------------------------------------------------------------
# Encoding


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 Pre-Authentication Encoding."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def keyid_for(public_key: Ed25519PublicKey) -> str:
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def envelope_bytes(envelope: dict[str, Any]) -> bytes:
    return canonical_json(envelope) + b"\n"


# ---------------------------------------------------------------------------------------------
# Statement


def _subject(name: str, algo: str, digest: str) -> dict[str, Any]:
    return {"name": name, "digest": {algo: digest}}


def build_statement(outcome: ScoreOutcome, settings_dump: dict[str, Any]) -> dict[str, Any]:
    m = outcome.measurements
    subjects = [
        _subject(f"git+head:{outcome.head_ref}", "gitCommit", outcome.head_sha),
        _subject(f"git+base:{outcome.base_ref}", "gitCommit", outcome.base_sha),
    ]
    if outcome.harness_digest:
        subjects.append(_subject("harness", "sha256", outcome.harness_digest))
    if m is not None and m.model_sha256:
        subjects.append(_subject("model", "sha256", m.model_sha256))
    if outcome.drafter_tree:  # read by the bot from the candidate commit, never a PR process's own report
        subjects.append(_subject("drafter", "gitTree", outcome.drafter_tree))
    v = outcome.verdict
    predicate = {
        "bot": {"name": "dspark-evalbot", "schema": 3},
        "code": {
            "repo": outcome.repo,
            "pr": outcome.pr_number,
            "base_ref": outcome.base_ref,
            "base_sha": outcome.base_sha,
            "head_ref": outcome.head_ref,
            "head_sha": outcome.head_sha,
            "harness_ref": outcome.harness_ref,
            "harness_sha": outcome.harness_sha,
            "harness_digest": outcome.harness_digest,
            "candidate_sha": outcome.candidate_sha,
            "candidate_tree": outcome.candidate_tree,
            "drafter_tree": outcome.drafter_tree,
            "engine_digest": outcome.engine_digest,
            "pr_scoring": outcome.pr_scoring,
            "tree_scorings": outcome.tree_scorings,
            "reused_from_head": outcome.reused_from_head,
        },
        "environment": {
            "box": outcome.box,
            "profile": outcome.profile,
            "device": m.device if m else "",
            "torch": m.torch if m else "",
            "triton": m.triton if m else "",
            "bot_python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "method": {
            "rounds": outcome.rounds,
            "schedule": ("long-lived sandboxed harness servers per ref running main's harness; every request timed "
                         "by the bot with the others frozen; rounds rotate process pairings, ABBA; adaptive stop"),
            "window_seed": m.seed if m else None,
            "noise_floor": m.noise.model_dump(mode="json") if m else None,
            "calibrated_now": outcome.calibrated_now,
            "settings": settings_dump,
        },
        "measurements": m.model_dump(mode="json") if m else None,
        "requests": [r.model_dump(mode="json") for r in outcome.requests],
        "gates": [g.model_dump(mode="json") for g in v.gates],
        "verdict": {
            "status": v.status,
            "tier": v.tier,
            "labels": v.labels,
            "reason": v.reason,
            "speedup": v.speedup.model_dump(mode="json") if v.speedup else None,
            "changed_harness_paths": v.changed_harness_paths,
            "conflicts": v.conflicts,
            "infra": v.infra.model_dump(mode="json") if v.infra else None,
        },
        "timestamps": {"started_at": outcome.started_at, "finished_at": outcome.finished_at},
    }
    return {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": PREDICATE_TYPE, "predicate": predicate}


def make_envelope(statement: dict[str, Any], key: Ed25519PrivateKey | None) -> dict[str, Any]:
    payload = canonical_json(statement)
    signatures = []
    if key is not None:
        sig = key.sign(pae(PAYLOAD_TYPE, payload))
        signatures.append({"keyid": keyid_for(key.public_key()), "sig": base64.b64encode(sig).decode("ascii")})
    return {"payload": base64.b64encode(payload).decode("ascii"), "payloadType": PAYLOAD_TYPE, "signatures": signatures}


def write_receipt(state_dir: Path, outcome: ScoreOutcome, envelope: dict[str, Any]) -> Path:
    directory = state_dir / RECEIPTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    stamp = outcome.started_at.replace(":", "").replace("-", "")
    prefix = f"pr{outcome.pr_number}-" if outcome.pr_number is not None else ""
    path = directory / f"{prefix}{outcome.head_sha[:12]}-vs-{outcome.base_sha[:12]}-{stamp}.intoto.json"
    n = 1
    while path.exists():
        n += 1
        path = path.with_name(path.name.replace(".intoto.json", f"-{n}.intoto.json"))
    path.write_bytes(envelope_bytes(envelope))
    return path


# ---------------------------------------------------------------------------------------------
# Keys


def generate_keypair(out: Path, *, force: bool = False) -> tuple[Path, Path]:
    """Write `out` (PKCS#8 PEM private key, mode 0600) and `out.pub` (PEM public key)."""
    pub = out.with_name(out.name + ".pub")
    if not force:
        for p in (out, pub):
            if p.exists():
                raise ReceiptError(f"{p} already exists (use --force to overwrite)")
    if not out.parent.is_dir():
        raise ReceiptError(f"directory {out.parent} does not exist")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    if force and out.exists():
        out.unlink()
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private_pem)
    os.chmod(out, 0o600)
    pub.write_bytes(public_pem)
    return out, pub


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ReceiptError(f"cannot read signing key {path}: {e.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise ReceiptError(f"{path} is not an unencrypted PEM private key: {e}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ReceiptError(f"{path} is not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ReceiptError(f"cannot read public key {path}: {e.strerror}") from None
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        raise ReceiptError(f"{path} is not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ReceiptError(f"{path} is not an Ed25519 public key")
    return key


# ---------------------------------------------------------------------------------------------
# Verification


def _b64decode(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise ReceiptError(f"{what} is not a string")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ReceiptError(f"{what} is not valid base64") from None
    if base64.b64encode(raw).decode("ascii") != text:
        raise ReceiptError(f"{what} is not canonical base64 (modified?)")
    return raw


def verify_envelope(data: bytes, public_key: Ed25519PublicKey) -> dict[str, Any]:
    """Return the statement if `data` is an intact receipt signed by `public_key`; else ReceiptError."""
    try:
        envelope = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ReceiptError("receipt is not valid JSON (modified or truncated)") from None
    if not isinstance(envelope, dict) or set(envelope) != {"payload", "payloadType", "signatures"}:
        raise ReceiptError("receipt is not a DSSE envelope (payload, payloadType, signatures)")
    if envelope["payloadType"] != PAYLOAD_TYPE:
        raise ReceiptError(f"unexpected payloadType {envelope['payloadType']!r}")
    payload = _b64decode(envelope["payload"], "payload")
    signatures = envelope["signatures"]
    if not isinstance(signatures, list):
        raise ReceiptError("signatures is not a list")
    if not signatures:
        raise ReceiptError("receipt is not signed (collected, not signed)")
    expected_keyid = keyid_for(public_key)
    matching = [s for s in signatures if isinstance(s, dict) and s.get("keyid") == expected_keyid]
    if not matching:
        got = ", ".join(str(s.get("keyid", "?"))[:16] for s in signatures if isinstance(s, dict))
        raise ReceiptError(f"no signature by this key (keyid {expected_keyid[:16]}…; receipt has {got or 'none'})")
    for sig in matching:
        if set(sig) != {"keyid", "sig"}:
            raise ReceiptError("signature entry has unexpected fields")
        raw_sig = _b64decode(sig["sig"], "signature")
        try:
            public_key.verify(raw_sig, pae(envelope["payloadType"], payload))
        except InvalidSignature:
            raise ReceiptError("signature does not match the payload (the receipt was modified or signed by another key)") from None
    if envelope_bytes(envelope) != data:
        raise ReceiptError("receipt bytes differ from its canonical form (modified after signing)")
    try:
        statement = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ReceiptError("payload is not JSON") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise ReceiptError("payload is not an in-toto Statement v1")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise ReceiptError(f"unexpected predicateType {statement.get('predicateType')!r}")
    if canonical_json(statement) != payload:
        raise ReceiptError("payload is not in canonical form")
    return statement


def verify_file(path: Path, public_key_path: Path) -> dict[str, Any]:
    key = load_public_key(public_key_path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ReceiptError(f"cannot read receipt {path}: {e.strerror}") from None
    return verify_envelope(data, key)
