"""Differential accuracy over the full vocabulary, computed by the bot from both refs' log-probs."""

import numpy as np
import pytest

from evalbot.decide.accuracy import LOGPROB_FLOOR, kl_rows, summarize_accuracy


def log_softmax(x):
    x = x - x.max(1, keepdims=True)
    return x - np.log(np.exp(x).sum(1, keepdims=True))


def topk_renormalised_kl(m, p, k=128):
    """The old gate's KL: over the union of both top-k sets, each side renormalised there."""
    out = []
    for a, b in zip(m, p):
        idx = np.union1d(np.argsort(a)[-k:], np.argsort(b)[-k:])
        pa, pb = np.exp(a[idx]), np.exp(b[idx])
        pa, pb = pa / pa.sum(), pb / pb.sum()
        out.append(float((pa * (np.log(pa) - np.log(pb))).sum()))
    return float(np.mean(out))


def test_full_vocabulary_kl_catches_what_top_k_renormalisation_hides():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(64, 4096)) * 2.0
    main, pr = log_softmax(logits), log_softmax(logits * 1.3)  # same argmax everywhere, another distribution
    full = summarize_accuracy(main.astype(np.float32), pr.astype(np.float32), rng.integers(0, 4096, 64))
    assert full.top1 == 1.0
    assert full.kl_mean > topk_renormalised_kl(main, pr) * 1.2  # the renormalised value understates it
    assert full.kl_mean == pytest.approx(float(np.mean(kl_rows(main, pr))))


def test_identical_dumps_have_zero_kl_and_equal_perplexity():
    rng = np.random.default_rng(1)
    lp = log_softmax(rng.normal(size=(32, 500))).astype(np.float32)
    s = summarize_accuracy(lp, lp.copy(), rng.integers(0, 500, 32))
    assert s.kl_mean == 0.0 and s.kl_max == 0.0 and s.top1 == 1.0 and s.ppl_main == pytest.approx(s.ppl_pr)
    assert sum(s.kl_histogram) == 32 and set(s.kl_percentiles) == {"p50", "p90", "p99"}


def test_a_token_the_pr_rules_out_is_a_huge_divergence_not_undefined():
    main = log_softmax(np.zeros((2, 8))).astype(np.float32)
    pr = main.copy()
    pr[0, 3] = -np.inf
    s = summarize_accuracy(main, pr, [1, 2])
    assert np.isfinite(s.kl_max) and s.kl_max > 10  # floored at LOGPROB_FLOOR, never NaN
    assert LOGPROB_FLOOR == -100.0


def test_shapes_must_match():
    with pytest.raises(ValueError, match="shape"):
        summarize_accuracy(np.zeros((2, 4), np.float32), np.zeros((2, 5), np.float32), [0, 1])
    with pytest.raises(ValueError, match="targets"):
        summarize_accuracy(np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32), [0])


def test_a_token_main_rules_out_counts_as_probability_zero():
    main = log_softmax(np.zeros((2, 8))).astype(np.float32)
    main[:, 5] = -np.inf  # main gives token 5 no probability at all
    pr = log_softmax(np.zeros((2, 8))).astype(np.float32)
    s = summarize_accuracy(main, pr, [1, 2])
    assert np.isfinite(s.kl_max) and s.kl_max >= 0.0 and s.top1 == 1.0


def test_main_nan_or_plus_inf_is_a_clear_error_naming_the_position():
    main = log_softmax(np.zeros((3, 8))).astype(np.float32)
    main[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"main's log-probs are not usable: 1 NaN and 0 \+inf values, the first at position 1"):
        summarize_accuracy(main, main.copy(), [0, 1, 2])


def test_a_campaign_whose_main_returns_nan_log_probs_stops_with_a_finding_against_main():
    """The campaign checks main's dump as it arrives: a Failure naming main's process, not an exception."""
    from types import SimpleNamespace

    from evalbot.measure import crosscheck
    from evalbot.measure.campaign import Campaign
    from evalbot.measure.client import Response
    from evalbot.measure.plan import Cell, Plan
    from evalbot.measure.servers import Failure, Process

    n, vocab = 4, 8

    class Client:
        def __init__(self, lp):
            self.info, self.lp = {"vocab_size": vocab}, lp

        def request(self, req, expect, timeout, max_payload):
            assert req["op"] == "logprobs" and expect == "logprobs"
            return Response(head={"positions": n, "dtype": "float32"}, payload=self.lp.tobytes(), seconds=0.01)

    handle = SimpleNamespace(thaw=lambda: None, freeze=lambda: None, poll=lambda: None, stderr_tail=lambda **kw: "")
    good = log_softmax(np.zeros((n, vocab))).astype(np.float32)
    bad = good.copy()
    bad[2, 3] = np.nan
    plan = Plan(profile="cpu", cells=(), processes=1, new_tokens=4, request_timeout_s=5.0,
                accuracy=(Cell("prose", 16),), accuracy_positions=n)
    c = Campaign(plan=plan, spawn=None, corpora={"prose": list(range(400))}, stop_rule=None)
    c.procs = {"base": [Process("base", 0, handle, Client(bad), 0.0)], "head": [Process("head", 0, handle, Client(good), 0.0)]}
    with pytest.raises(Failure) as e:
        crosscheck.accuracy(c)
    f = e.value.finding
    assert f.ref == "base" and f.where == "logprobs (main process 1)"
    assert f.message == "main's log-probs are not usable: 1 NaN and 0 +inf values, the first at position 2"


def test_a_shifted_pr_dump_is_counted_as_unnormalised_and_fails_the_gate():
    """+1 on every PR log-prob lowers KL(main || PR) by 1 and the row clamp at 0 hides the rest: a
    distribution at half the logits' scale (KL ~0.9, failing) read KL ~0.05 (passing)."""
    from evalbot.decide.gates import gate_accuracy
    from evalbot.settings import Thresholds
    from evalbot.testing import builders as b

    rng = np.random.default_rng(0)
    z = rng.normal(0, 3, (512, 4096))
    main, pr = log_softmax(z).astype(np.float32), log_softmax(0.5 * z).astype(np.float32)
    t = main.argmax(1)
    honest, shifted = summarize_accuracy(main, pr, t), summarize_accuracy(main, pr + 1.0, t)
    assert honest.pr_unnormalised == 0 and abs(honest.pr_worst_lse) < 1e-5 and honest.kl_mean > 0.1
    assert shifted.kl_mean < 0.1  # what the gate used to read
    assert shifted.pr_unnormalised == 512 and shifted.pr_worst_lse == pytest.approx(1.0, abs=1e-5)
    th = Thresholds()
    assert gate_accuracy(b.measurements(accuracy_summary=honest), th).status == "fail"  # on its real KL
    r = gate_accuracy(b.measurements(accuracy_summary=shifted), th)
    assert r.status == "fail" and r.detail.startswith(
        "512 of 512 of the PR's log-prob rows are not normalised (logsumexp up to +1, must be 0 ± 0.001)"), r.detail
    # one row off is enough; a float32 log-softmax over the vocabulary is within the tolerance
    one = pr.copy()
    one[7] -= 0.01
    s = summarize_accuracy(main, one, t)
    assert s.pr_unnormalised == 1 and s.pr_worst_lse == pytest.approx(-0.01, abs=1e-5)
    assert summarize_accuracy(main, main.copy(), t).pr_unnormalised == 0
