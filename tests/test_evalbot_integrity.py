"""Integrity: what the bot holds each process's answers to, and whose fault a problem is."""

from evalbot.decide.integrity import check_records, first_divergence
from evalbot.decide.records import Finding, Reported
from evalbot.settings import IntegritySettings
from evalbot.testing import builders as b

CFG = IntegritySettings()


def test_consistent_records_have_no_findings():
    assert check_records(b.records([0.8, 0.8, 0.9]), CFG).findings == []


def test_findings_of_the_measuring_side_keep_their_attribution():
    rec = b.records([0.8], findings=[Finding(ref="head", where="generate (PR process 1)", message="forged"),
                                      Finding(ref=None, where="sandbox", message="bwrap missing")])
    report = check_records(rec, CFG)
    assert [f.message for f in report.of("head")] == ["forged"] and [f.where for f in report.of(None)] == ["sandbox"]


def test_a_generation_of_the_wrong_length_is_a_finding_on_its_side():
    rec = b.records([0.8])
    g = next(x for x in rec.generations if x.ref == "head")
    g.tokens = g.tokens[:-1]
    (f,) = check_records(rec, CFG).of("head")
    assert "returned 15 tokens where 16 were asked for" in f.message


def test_a_report_longer_than_the_bots_clock_cannot_be_true():
    rec = b.records([0.8])
    g = next(x for x in rec.generations if x.ref == "head")
    g.reported = Reported(prefill_s=0.1, decode_s=g.bot_s * 2)
    (f,) = check_records(rec, CFG).of("head")
    assert "cannot be true" in f.message


def test_an_answer_faster_than_it_could_be_computed():
    report = check_records(b.records([0.1, 0.8]), CFG)  # round 1: PR in 0.1 s what took main 1.0 s
    (f,) = report.of("head")
    assert "faster than 5x main" in f.message and "round 1" in f.where
    assert check_records(b.records([0.25]), CFG).findings == []  # 4x faster: a real (huge) speedup


def test_one_main_request_slowed_from_outside_does_not_make_an_honest_answer_impossible():
    """A suite run beside other work once saw main take 1.668 s for a request the PR answered honestly in 0.311 s,
    because other work loaded the box: the bar is also main's median for that kind of request."""
    rec = b.records([0.9] * 6)
    slow = next(g for g in rec.generations if g.ref == "base" and g.round == 2 and g.mode == "dspark")
    slow.bot_s = 6.0  # 6.7x the PR's time on this one window
    assert check_records(rec, CFG).findings == []
    cheat = b.records([0.9] * 5 + [0.1])  # the last round answered in a tenth of main's time everywhere
    (f,) = check_records(cheat, CFG).of("head")
    assert "round 6" in f.where and "faster than 5x main" in f.message


def test_one_slowed_main_request_in_the_first_round_is_not_evidence_and_ends_nothing():
    """After one round main's median for a kind of request is that request: one main request slowed 13x by
    other work (0.25 -> 3.2 s) made an honest PR answer of 0.6 s "faster than 5x main", a REJECT for good
    after round 1 (a suite run beside a compile, 2026-12-05). The check waits for main's second answer of
    that kind; the slowed one is then judged against both."""
    one = b.records([0.6], main_s=0.25)
    next(g for g in one.generations if g.ref == "base" and g.mode == "dspark").bot_s = 3.2
    assert check_records(one, CFG).findings == []
    two = b.records([0.6, 0.25], main_s=0.25)
    next(g for g in two.generations if g.ref == "base" and g.mode == "dspark" and g.round == 0).bot_s = 3.2
    assert check_records(two, CFG).findings == []
    instant = b.records([0.02, 0.02], main_s=0.25)  # never computed: found from main's second answer on
    (f,) = check_records(instant, CFG).of("head")
    assert "faster than 5x main" in f.message and "round 1" in f.where
    assert check_records(b.records([0.02], main_s=0.25), CFG).findings == []  # one round: not judged yet


def test_one_finding_per_kind_of_problem_not_per_request():
    rec = b.records([0.8] * 4)
    for g in rec.generations:
        if g.ref == "head":
            g.tokens = g.tokens[:-1]
    assert len(check_records(rec, CFG).of("head")) == 1


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
