"""Anti-forgery: what the parent checks itself instead of believing the child."""

import pytest

from evalbot.settings import IntegritySettings
from evalbot.decide.integrity import (
    check_all, check_guard_line, check_tau_line, check_workload, first_divergence, verified_lossless_runs,
    wallclock_cross_check,
)
from evalbot.testing import builders as b

CFG = IntegritySettings()


def problems(line, reps=3, profile="gpu", cfg=CFG):
    return check_tau_line(line, reps, profile, cfg)


def test_consistent_line_has_no_problems():
    assert problems(b.tau_line()) == []
    assert problems(b.tau_line(lossy_runs=2)) == []  # lossy but honest about it


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def test_parent_counts_losslessness_itself():
    line = b.tau_line(lossy_runs=1)
    assert verified_lossless_runs(line) == 2
    forged = b.tau_line(lossy_runs=1, lossless=True, lossless_runs=3)
    msgs = problems(forged)
    assert any("claims 3 lossless runs, the streams show 2" in m for m in msgs)
    assert any("claims lossless=True" in m for m in msgs)


def test_every_requested_run_must_be_there():
    assert any("asked for 5" in m for m in problems(b.tau_line(reps=3), reps=5))
    short = b.tau_line(reps=3)
    short = short.model_copy(update={"dspark_tokens": short.dspark_tokens[:2]})
    assert any("dspark_tokens has 2 entries" in m for m in problems(short))


def test_token_counts_must_match_new_tokens_unless_eos():
    line = b.tau_line(new_tokens=16)
    longer = line.model_copy(update={"new_tokens": 8})
    assert any("AR stream has 16 tokens" in m for m in problems(longer))
    shorter = line.model_copy(update={"new_tokens": 32})  # 16 of 32: fine when no EOS ids are known
    assert not any("tokens for new_tokens" in m for m in problems(shorter))
    eos_cfg = IntegritySettings(eos_token_ids=[2])
    assert any("tokens for new_tokens" in m for m in problems(shorter, cfg=eos_cfg))  # does not end in EOS


def test_tps_must_equal_tokens_over_seconds():
    line = b.tau_line(ar_tps=90.0)
    assert any("implausible timings" in m and "ar_tps" in m for m in problems(line.model_copy(update={"ar_tps": 95.0})))
    assert not problems(line.model_copy(update={"ar_tps": 90.5}))  # within 1%
    runs = list(line.dspark_tps_runs)
    runs[0] *= 2
    assert any("DSpark run 1 reports" in m for m in problems(line.model_copy(update={"dspark_tps_runs": runs})))
    assert any("not the median" in m for m in problems(line.model_copy(update={"dspark_tps": 500.0})))


def test_tau_must_match_its_histogram_and_ceiling():
    line = b.tau_line(tau=2.0)
    assert any("acceptance histogram" in m for m in problems(line.model_copy(update={"tau": 3.0})))
    assert any("above the block size" in m for m in problems(line.model_copy(update={"tau": 9.0})))
    assert any("bins" in m for m in problems(line.model_copy(update={"accept_hist": [1, 2]})))


def test_guard_line_checks():
    assert check_guard_line(b.guard_line(), CFG) == []
    g = b.guard_line(reps=5)
    assert any("entries for reps" in m for m in check_guard_line(g.model_copy(update={"decode_tps_reps": [1.0]}), CFG))
    assert any("median" in m for m in check_guard_line(g.model_copy(update={"decode_tps": 1.0}), CFG))


def test_claimed_decode_cannot_exceed_the_parents_wall_clock():
    line = b.tau_line(ar_tps=10.0, dspark_tps=10.0)  # 1.6 s AR + 3 x 1.6 s DSpark
    ok = b.record("tau_check", "head", 0, [line], wall_s=10.0)
    bad = b.record("tau_check", "head", 0, [line], wall_s=5.0)
    assert not check_all([ok], 3, "gpu", CFG, 0.0).findings
    findings = check_all([bad], 3, "gpu", CFG, 0.0).findings
    assert any("claims 6.400 s of decode in a subprocess that ran 5.000 s" in f.message for f in findings)


def _rounds(main_claim_tps, pr_claim_tps, main_wall, pr_wall, n=3):
    recs = []
    for r in range(n):
        recs.append(b.record("tau_check", "base", r, [b.tau_line(ar_tps=50, dspark_tps=main_claim_tps)], wall_s=main_wall))
        recs.append(b.record("tau_check", "head", r, [b.tau_line(ar_tps=50, dspark_tps=pr_claim_tps)], wall_s=pr_wall))
    return recs


def test_wallclock_cross_check_accepts_a_real_speedup():
    # main claims 3 x 16/20 = 2.4 s of DSpark decode, PR 3 x 16/40 = 1.2 s: 1.2 s saved, and seen.
    w = wallclock_cross_check(_rounds(20, 40, main_wall=30.0, pr_wall=28.9), IntegritySettings(wallclock_slack_s=0.1), 0.0)
    assert w.evaluated and w.plausible
    assert w.claimed_saving_s == pytest.approx(1.2)


def test_wallclock_cross_check_flags_a_claim_the_clock_does_not_see():
    cfg = IntegritySettings(wallclock_slack_s=0.1)
    w = wallclock_cross_check(_rounds(20, 40, main_wall=30.0, pr_wall=30.0), cfg, 0.0)
    assert w.evaluated and not w.plausible
    report = check_all(_rounds(20, 40, main_wall=30.0, pr_wall=30.0), 3, "gpu", cfg, 0.0)
    assert any(f.ref == "head" and f.message.startswith("implausible timings") for f in report.findings)


def test_wallclock_slack_grows_with_calibrated_wall_noise():
    cfg = IntegritySettings(wallclock_slack_s=0.1)
    w = wallclock_cross_check(_rounds(20, 40, main_wall=30.0, pr_wall=30.0), cfg, wall_noise=0.05)  # 1.5 s slack
    assert w.plausible


def test_wallclock_not_evaluated_when_the_pr_claims_no_speedup():
    w = wallclock_cross_check(_rounds(40, 20, main_wall=30.0, pr_wall=30.0), IntegritySettings(), 0.0)
    assert not w.evaluated and w.plausible


def test_workload_must_match_between_refs():
    base = b.record("tau_check", "base", 0, [b.tau_line(ctx=1024), b.tau_line(ctx=4096)])
    same = b.record("tau_check", "head", 0, [b.tau_line(ctx=1024), b.tau_line(ctx=4096)])
    assert check_workload([base, same]) == []
    other_prompt = b.record("tau_check", "head", 0, [b.tau_line(ctx=1024, prompt_sha256="cd" * 32), b.tau_line(ctx=4096)])
    f = check_workload([base, other_prompt])
    assert f and f[0].kind == "workload" and "prompt" in f[0].message
    fewer = b.record("tau_check", "head", 0, [b.tau_line(ctx=1024)])
    assert check_workload([base, fewer])[0].kind == "workload"
    g_base = b.record("guard", "base", 0, [b.guard_line(guard="a"), b.guard_line(guard="b")])
    g_head = b.record("guard", "head", 0, [b.guard_line(guard="a")])
    assert check_workload([g_base, g_head])[0].kind == "workload"
