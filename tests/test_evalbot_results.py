"""The harness contract: only well-formed lines with this run's nonce get in."""

import json

import pytest

from evalbot.errors import ContractViolation
from evalbot.decide.contract import HarnessReportedError, parse_output
from evalbot.testing import builders as b

NONCE = b.NONCE


def dump(line) -> str:
    return json.dumps(line.model_dump(by_alias=True))


def test_valid_lines_parse():
    text = dump(b.tau_line(ctx=1024)) + "\n\n" + dump(b.tau_line(ctx=4096)) + "\n"
    lines = parse_output(text, "tau_check", NONCE)
    assert [x.ctx for x in lines] == [1024, 4096]


def test_guard_and_compare_lines_parse():
    assert parse_output(dump(b.guard_line()), "guard", NONCE)[0].guard == "qwen3-0.6b-shape"
    assert parse_output(dump(b.compare_line(top1=0.95)), "compare", NONCE)[0].top1 == 0.95


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(nonce="0" * 16), "nonce"),
        (lambda d: d.update(schema="dspark-harness/2"), "schema"),
        (lambda d: d.update(kind="guard"), "kind"),
        (lambda d: d.pop("ar_tps"), "ar_tps"),
        (lambda d: d.update(surprise=1), "surprise"),
        (lambda d: d.update(runs=True), "runs"),
        (lambda d: d.update(ar_tps="90.0"), "ar_tps"),
        (lambda d: d.update(ar_tps=-1.0), "ar_tps"),
        (lambda d: d.update(ctx=0), "ctx"),
        (lambda d: d.update(dspark_tokens=[[1, 2, "3"]]), "dspark_tokens"),
    ],
)
def test_malformed_lines_are_rejected(mutate, message):
    d = b.tau_line().model_dump(by_alias=True)
    mutate(d)
    with pytest.raises(ContractViolation, match=message):
        parse_output(json.dumps(d), "tau_check", NONCE)


def test_non_json_stdout_is_rejected():
    with pytest.raises(ContractViolation, match="not JSON"):
        parse_output("loading weights...\n" + dump(b.tau_line()), "tau_check", NONCE)
    with pytest.raises(ContractViolation, match="not a JSON object"):
        parse_output("[1, 2]", "tau_check", NONCE)


def test_no_result_is_rejected():
    with pytest.raises(ContractViolation, match="no result"):
        parse_output("\n", "guard", NONCE)


def test_error_line_is_reported_as_such():
    line = json.dumps({"schema": "dspark-harness/1", "nonce": NONCE, "kind": "error", "reason": "no GPU"})
    with pytest.raises(HarnessReportedError, match="no GPU"):
        parse_output(line, "tau_check", NONCE)


def test_duplicates_are_rejected():
    with pytest.raises(ContractViolation, match="twice"):
        parse_output(dump(b.tau_line()) + "\n" + dump(b.tau_line()), "tau_check", NONCE)
    with pytest.raises(ContractViolation, match="twice"):
        parse_output(dump(b.guard_line()) + "\n" + dump(b.guard_line()), "guard", NONCE)
    with pytest.raises(ContractViolation, match="exactly 1"):
        parse_output(dump(b.compare_line()) + "\n" + dump(b.compare_line()), "compare", NONCE)
