"""`evalbot keygen`, `evalbot receipt verify`, `evalbot receipt show`: the receipt signing key and
reading receipts (evalbot.report.receipt, evalbot.report.receipt_view). Parsers: evalbot.cli."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evalbot.errors import EvalbotError
from evalbot.report import receipt, receipt_view
from evalbot.report.render import printable

EXIT_OK = 0


class ReceiptMismatch(EvalbotError):
    """An intact, signed receipt about something else than what the caller expects."""


def cmd_keygen(args: argparse.Namespace) -> int:
    private, public = receipt.generate_keypair(Path(args.out), force=args.force)
    key = receipt.load_private_key(private)
    print(f"wrote {private} (private, mode 0600) and {public} (public)")
    print(f"keyid {receipt.keyid_for(key.public_key())}")
    print(f"sign receipts with: export EVALBOT_SIGNING_KEY={private.resolve()}")
    return EXIT_OK


def cmd_receipt_verify(args: argparse.Namespace) -> int:
    statement = receipt.verify_file(Path(args.file), Path(args.key))
    pred = statement["predicate"]
    verdict = pred.get("verdict", {})
    code = pred.get("code", {})
    # A signature says the bot wrote it, not that it is about this PR: a receipt of another head, PR or
    # repository is a genuine receipt replayed. Checked only where asked (--expect-*).
    for what, want, got in (("head", args.expect_head, code.get("head_sha")), ("repository", args.expect_repo, code.get("repo")),
                            ("PR", args.expect_pr, code.get("pr"))):
        if want is not None and str(want) != str(got):
            raise ReceiptMismatch(f"{args.file} is signed, but for {what} {got!s:.60}, not {want!s:.60}")
    keyid = receipt.keyid_for(receipt.load_public_key(Path(args.key)))
    print(f"OK: {args.file} is intact and signed by keyid {keyid[:16]}…")
    print(printable(
        f"head {code.get('head_sha', '?')[:12]} vs base {code.get('base_sha', '?')[:12]}: "
        f"{verdict.get('status')} {verdict.get('tier') or ''} — {verdict.get('reason', '')}".rstrip()
    ))
    return EXIT_OK


def cmd_receipt_show(args: argparse.Namespace) -> int:
    statement, keyids = receipt_view.read_receipt(Path(args.file))
    sys.stdout.write(printable(receipt_view.show_receipt(statement, keyids, source=args.file)))
    return EXIT_OK
