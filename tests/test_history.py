"""The history: the adapter from today's ScoreOutcome, the stores (SQLite and Redis), and the
dashboard's pages and charts, built from constructed `HistoryEntry` values only."""

from __future__ import annotations

import re
import sqlite3

import pytest

from evalbot.decide.noise import NoiseFloor
from evalbot.decide.outcome import ReceiptInfo, ScoreOutcome
from evalbot.decide.verdict import decide, not_evaluated_harness_changed
from evalbot.history.adapter import calibration_entry, history_entry, noise_floor_entry, record_scoring
from evalbot.history.schema import CellFigures, HistoryEntry
from evalbot.history.store import RedisHistory, SqliteHistory, recorded
from evalbot.report import charts, dashboard
from evalbot.testing import builders as b
from fakegithub.helpers import redis_url  # noqa: F401  (pytest fixture)

MAIN = ["a1" * 20, "b2" * 20, "c3" * 20]


def entry(i: int = 0, *, pr: int | None = 7, kind: str = "score", **kw) -> HistoryEntry:
    fields = dict(
        kind=kind, repo="Octo/DSpark", pr_number=pr, base_sha=MAIN[i % 3], head_sha=f"{i:02d}" * 20, box="h200-a",
        profile="gpu", started_at=f"2026-12-0{i + 1}T10:00:00Z", finished_at=f"2026-12-0{i + 1}T10:40:00Z",
        status="scored", tier="M", reason="DSpark decode +8.0%", speedup_pct=8.0 + i, ci_low_pct=6.5, ci_high_pct=9.5,
        rounds=[1.07 + i / 100, 1.08 + i / 100, 1.09 + i / 100],
        cells=[CellFigures(corpus="code", ctx=4096, main_dspark_tps=3800.0 + 10 * i, main_ar_tps=1134.0, main_tau=3.1,
                           pr_dspark_tps=4100.0, pr_ar_tps=1130.0, pr_tau=3.2),
               CellFigures(corpus="prose", ctx=1024, main_dspark_tps=1500.0 + 5 * i, main_ar_tps=1190.0, main_tau=1.9)],
        noise={"dspark_decode": 0.02, "ar_decode": 0.01}, receipt='{"payload":"e30=","payloadType":"x","signatures":[]}\n',
        scorecard="<!-- dspark-evalbot:scorecard v=1 head=x -->\n### DSpark eval — eval-dspark:M\n\n| a | b |\n|---|---|\n| 1 | 2 |\n",
    )
    fields.update(kw)
    return HistoryEntry(**fields)


# -- the adapter: today's ScoreOutcome -> the stable schema ------------------------------------------------
def _outcome(verdict, m=None) -> ScoreOutcome:
    return ScoreOutcome(
        repo="/srv/checkout", base_ref="main", head_ref="pr", base_sha=MAIN[0], head_sha="d4" * 20, harness_ref="origin/main",
        harness_sha=MAIN[0], profile="gpu", rounds=3, reps=3, box="h200-a", pr_number=12, verdict=verdict,
        measurements=m, started_at="2026-12-01T10:00:00Z", finished_at="2026-12-01T10:30:00Z", scorecard="card",
        receipt=ReceiptInfo(path="/r", signed=False, envelope="ENVELOPE"),
    )


def test_history_entry_of_a_scored_outcome():
    m = b.measurements([1.08, 1.09, 1.07], cells=[b.cell(ctx=4096, speedups=[1.08, 1.09, 1.07], main_dspark=74.8,
                                                         main_ar=90.2, pr_tau=1.2, main_tau=1.1)],
                       noise_floor=b.noise(0.02))
    e = history_entry(_outcome(decide(m, b.settings()), m), repo="octo/dspark", receipt_ref="https://x/r.json")
    assert (e.kind, e.repo, e.pr_number, e.status, e.tier) == ("score", "octo/dspark", 12, "scored", "M")
    assert e.rounds == [1.08, 1.09, 1.07] and e.speedup_pct == pytest.approx(8.0)
    assert e.ci_low_pct is not None and e.ci_low_pct <= e.speedup_pct <= e.ci_high_pct
    (cell,) = e.cells
    assert (cell.corpus, cell.ctx, cell.main_dspark_tps, cell.main_ar_tps, cell.main_tau, cell.pr_tau) == ("prose", 4096, 74.8, 90.2, 1.1, 1.2)
    assert cell.pr_dspark_tps == pytest.approx(74.8 * 1.08)
    assert e.noise["dspark_decode"] == 0.02 and set(e.noise) == {"dspark_decode", "ar_decode", "ar_cell", "guard_decode", "guard_prefill"}
    assert (e.receipt, e.receipt_ref, e.scorecard) == ("ENVELOPE", "https://x/r.json", "card")
    assert e.duration_s == 1800


def test_history_entry_of_an_outcome_without_measurements():
    e = history_entry(_outcome(not_evaluated_harness_changed(["harness/x.py"])))
    assert (e.status, e.tier, e.rounds, e.cells, e.noise, e.speedup_pct) == ("not_evaluated", None, [], [], {}, None)
    assert e.repo == "/srv/checkout"  # without a forge name, the clone's path


def test_calibration_entry():
    floor = NoiseFloor(box="h200-a", profile="gpu", source="calibration", dspark_decode=0.03, ar_decode=0.01,
                       ar_cell=0.015, guard_decode=0.02, guard_prefill=0.02, rounds=3, base_sha=MAIN[1], measured_at="2026-12-02T08:00:00Z")
    e = calibration_entry(floor, repo="octo/dspark")
    assert (e.kind, e.status, e.base_sha, e.head_sha, e.finished_at) == ("calibration", "calibrated", MAIN[1], MAIN[1], floor.measured_at)
    assert e.noise == {"dspark_decode": 0.03, "ar_decode": 0.01, "ar_cell": 0.015, "guard_decode": 0.02, "guard_prefill": 0.02}


def test_a_scoring_records_the_calibration_it_gated_with_once(tmp_path):
    floor = NoiseFloor(box="h200-a", profile="gpu", source="calibration", dspark_decode=0.03, ar_decode=0.01,
                       ar_cell=0.015, guard_decode=0.02, guard_prefill=0.02, rounds=3, base_sha=MAIN[0], measured_at="2026-11-30T08:00:00Z")
    m = b.measurements([1.08, 1.09, 1.07], noise_floor=floor)
    store = SqliteHistory(tmp_path / "h.sqlite3")
    record_scoring(store, _outcome(decide(m, b.settings()), m), repo="octo/dspark")
    record_scoring(store, _outcome(decide(m, b.settings()), m).model_copy(update={"head_sha": "e5" * 20}), repo="octo/dspark")
    (calibration,) = store.entries(kind="calibration")  # two scorings, one calibration
    assert calibration.finished_at == floor.measured_at and calibration.noise["dspark_decode"] == 0.03
    assert len(store.entries(kind="score")) == 2


def test_the_default_floor_is_no_calibration():
    m = b.measurements([1.08, 1.09, 1.07], noise_floor=b.noise(0.02))
    assert noise_floor_entry(_outcome(decide(m, b.settings()), m)) is None
    assert noise_floor_entry(_outcome(not_evaluated_harness_changed(["harness/x.py"]))) is None


# -- the stores ------------------------------------------------------------------------------------------------
@pytest.fixture(params=["sqlite", "redis"])
def store(request, tmp_path):
    if request.param == "sqlite":
        yield SqliteHistory(tmp_path / "history.sqlite3")
    else:
        yield RedisHistory(request.getfixturevalue("redis_url"))


def test_store_keeps_entries_in_finishing_order_and_selects(store):
    entries = [entry(2), entry(0), entry(1, pr=8), entry(0, kind="calibration", pr=None, status="calibrated")]
    for e in entries:
        store.add(e)
    store.add(entry(0))  # the same scoring again: one entry
    got = store.entries()
    assert [e.finished_at for e in got] == sorted(e.finished_at for e in got) and len(got) == 4
    assert [e.pr_number for e in store.entries(repo="octo/dspark", pr_number=7)] == [7, 7]
    assert [e.kind for e in store.entries(kind="calibration")] == ["calibration"]
    assert store.entries(repo="someone/else") == []
    assert store.get(entry(1, pr=8).entry_id) == entry(1, pr=8) and store.get("0" * 20) is None


def test_an_entry_that_does_not_decode_is_skipped(tmp_path, caplog):
    store = SqliteHistory(tmp_path / "h.sqlite3")
    store.add(entry(0))
    with sqlite3.connect(tmp_path / "h.sqlite3") as db:
        db.execute("INSERT INTO history VALUES ('x', 'score', 'octo/dspark', 1, 0, 'not json')")
    assert [e.head_sha for e in store.entries()] == [entry(0).head_sha]
    assert "does not decode" in caplog.text


def test_a_history_that_cannot_be_written_costs_nothing(tmp_path, caplog):
    store = SqliteHistory(tmp_path / "h.sqlite3")
    store.close()
    assert recorded(store, entry(0)) is None and "could not record" in caplog.text


# -- charts ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("values", [[1.0, 2.0, 3.0], [3800.0, 3810.0], [5.0], [-2.0, 9.5], [0.0001, 0.0003]])
def test_axis_covers_the_values_on_round_ticks(values):
    axis = charts.nice_axis(values)
    assert axis.low <= min(values) and axis.high >= max(values) and axis.low < axis.high
    steps = {round(b - a, 9) for a, b in zip(axis.ticks, axis.ticks[1:])}
    assert len(steps) == 1 and 2 <= len(axis.ticks) <= 12


def test_line_chart_plots_every_value_higher_values_higher():
    svg = charts.line_chart("t", ["a", "b", "c"], [charts.Series("s", [1.0, None, 3.0]), charts.Series("u", [2.0, 2.5, 2.0])])
    points = re.findall(r'<circle class="point" cx="([\d.]+)" cy="([\d.]+)"[^>]*data-series="(\w)" data-value="([\d.]+)"', svg)
    assert len(points) == 5  # None leaves a gap, not a point
    by_value = sorted(points, key=lambda p: float(p[3]))
    assert [float(p[1]) for p in by_value] == sorted((float(p[1]) for p in by_value), reverse=True)  # SVG y grows downwards


def test_chart_text_is_escaped():
    svg = charts.line_chart("<script>", ["<b>"], [charts.Series("a&b", [1.0])])
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "a&amp;b" in svg


# -- pages ----------------------------------------------------------------------------------------------------------
def test_overview_plots_main_per_commit_and_the_noise_floor():
    entries = [entry(0), entry(1, pr=8), entry(2), entry(0, kind="calibration", pr=None, status="calibrated")]
    html = dashboard.overview_page(entries, repo="octo/dspark")
    assert html.count('<svg class="chart"') == 4  # DSpark tok/s, AR tok/s, tau, noise floor
    for sha in MAIN:
        assert sha[:7] in html
    assert 'data-value="3820"' in html and 'data-series="code@4k"' in html and 'data-series="prose@1k"' in html
    assert "#8" in html and "/dashboard/pr/7" in html


def test_main_figures_are_the_median_over_scorings_against_that_commit():
    a, b_ = entry(0, head_sha="e5" * 20), entry(0, head_sha="f6" * 20)
    b_.cells[0].main_dspark_tps = 4000.0
    c = entry(0, head_sha="07" * 20)
    c.cells[0].main_dspark_tps = 3000.0
    (commit,) = dashboard.main_commits([a, b_, c], "gpu", "h200-a")
    assert commit.figures["code@4k"]["dspark_tps"] == 3800.0


def test_figures_of_other_boxes_and_profiles_are_plotted_apart():
    html = dashboard.overview_page([entry(0), entry(1, box="other-box"), entry(2, profile="cpu")], repo="r")
    assert html.count("main over its commits") == 3


def test_pull_page_shows_each_scoring_with_its_rounds_and_scorecard():
    html = dashboard.pull_page([entry(0), entry(1), entry(2, pr=8)], 7, repo="octo/dspark")
    assert html.count('class="point"') == 6 and html.count('class="interval"') == 2
    assert f'id="head-{entry(1).head_sha}"' in html and "<table>" in html and "<!-- dspark-evalbot" not in html
    assert f"/dashboard/receipt/{entry(0).entry_id}.json" in html


def test_scorecard_html_is_escaped_but_for_sub_and_details():
    card = "### x\n\n<script>alert(1)</script>\n\n<sub>small</sub> <img src=x onerror=alert(1)>"
    html = dashboard.pull_page([entry(0, scorecard=card)], 7, repo="r")
    assert "<script>alert" not in html and "<img" not in html and "<sub>small</sub>" in html


def test_entry_page_has_the_raw_figures():
    html = dashboard.entry_page(entry(1), repo="r")
    assert "3810.0" in html and "4100.0" in html and "1.0800" in html and "code@4k" in html


def test_empty_history_says_so():
    assert "Nothing scored yet" in dashboard.overview_page([], repo="r")
    assert "No scoring of #3" in dashboard.pull_page([], 3, repo="r")
