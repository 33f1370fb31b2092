"""`evalbot receipt show FILE`: a receipt made readable. The envelope is decoded (not verified: that is
`evalbot receipt verify --key`), and the statement is shown as a person reads it: what was scored,
where and how, the verdict and its gates, the speedup of every round, the raw figures per workload
cell and every request the bot timed (schema 2 and 3; a schema-1 receipt shows its harness runs). The predicate is read as plain JSON, field by field, so a receipt of an
older or newer schema still shows what it has."""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any

from evalbot.errors import ReceiptError
from evalbot.report.receipt import PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE
from evalbot.report.render import render

# Figures of a workload cell shown first, in this order; any other number the cell has follows them.
CELL_FIGURES = ("main_dspark_tps", "pr_dspark_tps", "main_ar_tps", "pr_ar_tps", "main_tau", "pr_tau",
                "main_prefill_tps", "pr_prefill_tps")


def decode_envelope(data: bytes) -> tuple[dict[str, Any], list[str]]:
    """(statement, key ids of its signatures) of a DSSE receipt; ReceiptError with one clear line if it is none."""
    try:
        envelope = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ReceiptError("not valid JSON (is it a receipt, .intoto.json?)") from None
    if not isinstance(envelope, dict) or not {"payload", "payloadType"} <= set(envelope):
        raise ReceiptError("not a DSSE envelope (payload, payloadType, signatures)")
    if envelope["payloadType"] != PAYLOAD_TYPE:
        raise ReceiptError(f"unexpected payloadType {envelope['payloadType']!r}")
    try:
        statement = json.loads(base64.b64decode(str(envelope["payload"]).encode("ascii"), validate=True))
    except (binascii.Error, UnicodeError, ValueError):
        raise ReceiptError("its payload is not base64-encoded JSON") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise ReceiptError("its payload is not an in-toto Statement v1")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise ReceiptError(f"unexpected predicateType {statement.get('predicateType')!r}")
    if not isinstance(statement.get("predicate"), dict):
        raise ReceiptError("the statement has no predicate")
    signatures = envelope.get("signatures") or []
    keyids = [str(s.get("keyid", "?")) for s in signatures if isinstance(s, dict)] if isinstance(signatures, list) else []
    return statement, keyids


def read_receipt(path: Path) -> tuple[dict[str, Any], list[str]]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ReceiptError(f"cannot read receipt {path}: {exc.strerror}") from None
    try:
        return decode_envelope(data)
    except ReceiptError as exc:
        raise ReceiptError(f"{path}: {exc}") from None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—" if value is None else str(value)
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _cells(measurements: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """A table of every workload cell: its name, then its figures (known ones first)."""
    cells = [c for c in _list(measurements.get("cells", measurements.get("contexts"))) if isinstance(c, dict)]
    numeric = {k for c in cells for k, v in c.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    numeric -= {"ctx"}
    columns = [k for k in CELL_FIGURES if k in numeric] + sorted(numeric - set(CELL_FIGURES))
    rows = [[f"{c.get('prompt', c.get('corpus', '?'))}@{c.get('ctx', '?')}", *(_number(c.get(k)) for k in columns)]
            for c in cells]
    return columns, rows


def show_receipt(statement: dict[str, Any], keyids: list[str], *, source: str = "", templates: Path | None = None) -> str:
    pred = _dict(statement.get("predicate"))
    measurements = _dict(pred.get("measurements"))
    verdict = _dict(pred.get("verdict"))
    columns, rows = _cells(measurements)
    rounds = [r for r in _list(measurements.get("speedup_rounds")) if isinstance(r, (int, float))]
    return render(
        "receipt_show.txt.j2", templates, source=source, subjects=_list(statement.get("subject")), keyids=keyids,
        code=_dict(pred.get("code")), environment=_dict(pred.get("environment")), method=_dict(pred.get("method")),
        noise=_dict(_dict(pred.get("method")).get("noise_floor")), verdict=verdict, speedup=_dict(verdict.get("speedup")),
        gates=[g for g in _list(pred.get("gates")) if isinstance(g, dict)], rounds=rounds, columns=columns, rows=rows,
        requests=[r for r in _list(pred.get("requests")) if isinstance(r, dict)],
        runs=[r for r in _list(pred.get("runs")) if isinstance(r, dict)], timestamps=_dict(pred.get("timestamps")),
        number=_number,
    )
