"""From campaign records to measurements: bot-timed ratios per round, what was only reported, the clock check."""

import pytest

from evalbot.decide.clock import clock_check
from evalbot.decide.measurements import summarize
from evalbot.decide.records import Reported
from evalbot.testing import builders as b

NOISE = b.noise(0.01)


def test_round_ratios_are_mains_seconds_over_the_prs_on_the_same_window():
    m = summarize(b.records([0.8, 1.0, 0.5]), noise=NOISE)
    assert m.rounds == 3 and m.speedup_rounds == pytest.approx([1.25, 1.0, 2.0])
    assert [c.name for c in m.cells] == ["code@256", "prose@256"]
    c = m.cells[0]
    assert c.dspark_ratios == pytest.approx([1.25, 1.0, 2.0]) and c.ar_ratios == pytest.approx([1.0, 1.0, 1.0])
    assert c.main_dspark_tps == pytest.approx(16.0) and c.pr_dspark_tps == pytest.approx(16 / 0.8)
    assert c.pr_streams == c.pr_verified == 3 and c.ar_compared == c.ar_equal == 3


def test_rounds_carry_their_pairing_for_the_interval():
    m = summarize(b.records([0.9] * 6, processes=2), noise=NOISE)
    assert m.speedup_groups == [0, 1, 2, 3, 0, 1]
    assert {(r.main_process, r.pr_process) for r in m.round_summaries} == {(0, 0), (1, 1), (0, 1), (1, 0)}


def test_an_incomplete_round_gives_no_speedup_sample():
    rec = b.records([0.8, 0.8])
    rec.generations = [g for g in rec.generations if not (g.round == 1 and g.ref == "head" and g.corpus == "prose")]
    m = summarize(rec, noise=NOISE)
    assert len(m.speedup_rounds) == 1


def test_reported_figures_are_kept_apart_and_taus_come_from_the_histograms():
    m = summarize(b.records([0.8]), noise=NOISE)
    c = m.cells[0]
    assert c.pr_reported_dspark_tps == pytest.approx(16 / (0.8 * 0.8))  # tokens / its own decode seconds
    assert c.pr_tau == pytest.approx(1.5)  # accept_hist [0, 4, 4, ...]


def test_ar_streams_that_differ_from_mains_are_counted():
    rec = b.records([1.0, 1.0])
    g = next(x for x in rec.generations if x.ref == "head" and x.mode == "ar")
    g.tokens = g.tokens[:5] + [999] * 11
    c = summarize(rec, noise=NOISE).cells[0]
    assert (c.ar_compared, c.ar_equal, c.ar_first_divergence) == (2, 1, 5)


def test_a_pr_whose_own_clock_says_it_is_faster_is_flagged_not_believed():
    rec = b.records([1.0, 1.0])
    for g in rec.generations:
        if g.ref == "head":
            g.reported = Reported(prefill_s=0.05 * g.bot_s, decode_s=0.4 * g.bot_s)
    check = clock_check(rec.generations, NOISE)
    assert check.flagged and "faster than it was" in check.detail
    assert summarize(rec, noise=NOISE).speedup_rounds == pytest.approx([1.0, 1.0])  # the tier reads the bot's clock


def test_guards_ratios_for_generation_and_prefill():
    rec = b.records([1.0])
    for ref, secs in (("base", 1.0), ("head", 1.25)):
        rec.generations.append(b.generation(ref=ref, round=0, model="guard:g", mode="ar", ctx=256, new_tokens=16,
                                            bot_s=secs, offset=1, corpus="random:g"))
        rec.generations.append(b.generation(ref=ref, round=0, model="guard:g", mode="ar", ctx=256, new_tokens=1,
                                            bot_s=secs / 10, offset=2, corpus="random:g"))
    (g,) = summarize(rec, noise=NOISE).guards
    assert g.generation_ratios == pytest.approx([0.8]) and g.prefill_ratios == pytest.approx([0.8])
    assert g.pr_prefill_tps == pytest.approx(256 / 0.125)


def test_cells_and_guards_keep_their_nominal_names_and_show_the_drawn_lengths_they_were_timed_at():
    """A campaign measures at lengths drawn from its seed below the nominal ones (measure.plan.drawn_lengths):
    the cell is still `code@256`, its summary lists the exact length, and a guard's prefill speed divides the
    tokens actually sent, not the nominal length."""
    rec = b.records([0.8, 0.8])
    for g in rec.generations:
        g.window.length = 241
    for ref, secs in (("base", 1.0), ("head", 1.25)):
        for n, off in ((16, 1), (1, 2)):
            g = b.generation(ref=ref, round=0, model="guard:g", mode="ar", ctx=256, new_tokens=n, bot_s=secs / (10 if n == 1 else 1),
                             offset=off, corpus="random:g")
            g.window.length = 250
            rec.generations.append(g)
    m = summarize(rec, noise=NOISE)
    assert [c.name for c in m.cells] == ["code@256", "prose@256"] and m.cells[0].lengths == [241]
    (g,) = m.guards
    assert g.lengths == [250] and g.pr_prefill_tps == pytest.approx(250 / 0.125)


def test_the_budget_waits_for_every_pairing_up_to_its_hard_cap():
    """A 2-vCPU A/A ended by its budget after one round over one of four pairings decided nothing: the
    budget now ends a run only once every pairing is measured (min_rounds), or at hard_budget times itself."""
    from evalbot.measure.plan import Cell, Plan, budget_spent

    plan = Plan(profile="cpu", cells=(Cell("code", 256),), new_tokens=24, processes=2, min_rounds=4, budget_s=180.0)
    assert budget_spent(plan, 1, 170.0) is None
    assert budget_spent(plan, 1, 230.0) is None  # past the budget, short of the pairings: go on
    assert "after 1 of the 4 rounds" in budget_spent(plan, 1, 541.0)  # past 3 x 180 s: stop anyway
    assert budget_spent(plan, 4, 181.0) == "the 180 s budget would be exceeded by another round"


def test_ar_ratios_carry_their_processes_and_pool_per_round():
    m = summarize(b.records([1.0] * 4, ar_pr_seconds=[0.5, 1.0, 2.0, 1.0], processes=2), noise=NOISE)
    assert m.ar_rounds == pytest.approx([2.0, 1.0, 0.5, 1.0])  # geomean over both cells of main s / PR s
    assert m.ar_round_processes() == [(r.main_process, r.pr_process) for r in m.round_summaries]
    c = m.cells[0]
    assert len(c.ar_processes) == len(c.ar_ratios) == 4 and set(c.ar_processes) == {(0, 0), (1, 1), (0, 1), (1, 0)}


def test_the_floor_of_the_pooled_ar_statistic_is_taken_apart_from_the_worst_cells():
    from evalbot.decide.calibration import noise_from_aa
    rec = b.records([1.0] * 4, ar_pr_seconds=[1.0] * 4, processes=2)
    for g in rec.generations:  # A/A: one cell reads 4 % slow for the PR, the other 4 % fast
        if g.mode == "ar" and g.ref == "head":
            g.bot_s *= 1.04 if g.corpus == "code" else 1 / 1.04
    f = noise_from_aa(rec, box="b", profile="cpu", engine="e", base_sha="s", margin=1.5, minimum=0.001)
    assert f.ar_cell == pytest.approx(1.5 * 0.04) and f.ar_decode == pytest.approx(0.001)


def _aa_records(pr_ar_factor: float):
    rec = b.records([1.0] * 4, ar_pr_seconds=[1.0] * 4, processes=2)
    for g in rec.generations:  # an A/A whose PR processes happened to decode AR this much slower
        if g.mode == "ar" and g.ref == "head":
            g.bot_s *= pr_ar_factor
    return rec


def test_a_calibration_pools_its_campaign_with_the_ones_stored_before_it():
    """One A/A is one draw of the noise: a lucky, tight one must not shrink the floor a wider one set."""
    from evalbot.decide.calibration import noise_from_aa
    kw = dict(box="b", profile="cpu", engine="e", base_sha="s", margin=1.5, minimum=0.001)
    wide = noise_from_aa(_aa_records(1.06), **kw, pool=5)
    assert wide.campaigns == 1 and wide.ar_decode == pytest.approx(1.5 * (1 - 1 / 1.06))
    tight = noise_from_aa(_aa_records(1.005), **kw, previous=wide, pool=5)
    assert tight.campaigns == 2 and tight.ar_decode == pytest.approx(wide.ar_decode)  # the wide campaign still counts
    assert tight.rounds == wide.rounds * 2 and [round(o.ar_decode, 4) for o in tight.aa] == [0.0566, 0.005]
    # the pool keeps the last `pool` campaigns: once the wide one has left it, the floor follows the tight ones
    f = tight
    for _ in range(4):
        f = noise_from_aa(_aa_records(1.005), **kw, previous=f, pool=5)
    assert f.campaigns == 5 and f.ar_decode == pytest.approx(1.5 * (1 - 1 / 1.005))
    # another engine version's floor is not evidence for this one
    other = noise_from_aa(_aa_records(1.005), **{**kw, "engine": "other"}, previous=wide, pool=5)
    assert other.campaigns == 1


def test_a_floor_stored_before_pooling_counts_as_the_campaign_it_came_from():
    from evalbot.decide.calibration import noise_from_aa
    from evalbot.decide.noise import NoiseFloor
    old = NoiseFloor(box="b", profile="cpu", engine="e", source="calibration", dspark_decode=0.03, ar_decode=0.09,
                     ar_cell=0.09, guard_decode=0.03, guard_prefill=0.03, rounds=4)
    f = noise_from_aa(_aa_records(1.0), box="b", profile="cpu", engine="e", base_sha="s", margin=1.5, minimum=0.001,
                      previous=old, pool=5)
    assert f.campaigns == 2 and f.ar_decode == pytest.approx(0.09) and f.rounds == 8
