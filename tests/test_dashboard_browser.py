"""The dashboard in a real browser: headless Chromium (Debian's `chromium`; `./dspark test` installs it
where it can) opens the pages the bot serves and checks that every figure of the history is drawn:
one laid-out point per value, higher values higher, lines of real length, and series colours on
the rendered pixels. Skipped, with the reason, where Chromium is not installed."""

from __future__ import annotations

import threading

import httpx
import pytest
import uvicorn

from browser import Browser, chromium
from evalbot.bot.dashboard import dashboard_app
from evalbot.history.store import SqliteHistory
from evalbot.report.charts import PALETTE
from fakegithub.helpers import free_port, wait_until_healthy
from test_history import entry

pytestmark = pytest.mark.skipif(chromium() is None, reason="chromium is not installed (apt-get install -y chromium)")

POINTS = """(() => [...document.querySelectorAll('svg.chart circle.point')].map(p => {
  const r = p.getBoundingClientRect(), box = p.closest('svg').getBoundingClientRect();
  return {chart: p.closest('svg').getAttribute('aria-label'), series: p.dataset.series, value: +p.dataset.value,
          y: r.y + r.height / 2, w: r.width, inside: r.left >= box.left && r.right <= box.right && r.top >= box.top && r.bottom <= box.bottom};
}))()"""
LINES = "[...document.querySelectorAll('svg.chart path.line')].map(p => p.getTotalLength())"
# Rasterise the first chart as the browser draws it and count the pixels of the first series' colour.
PIXELS = """(async () => {
  const svg = document.querySelector('svg.chart'), r = svg.getBoundingClientRect();
  const img = new Image(); img.src = 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(new XMLSerializer().serializeToString(svg));
  await img.decode();
  const c = document.createElement('canvas'); c.width = r.width; c.height = r.height;
  const g = c.getContext('2d'); g.drawImage(img, 0, 0, r.width, r.height);
  const d = g.getImageData(0, 0, c.width, c.height).data, want = [%d, %d, %d];
  let n = 0; for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i]-want[0]) + Math.abs(d[i+1]-want[1]) + Math.abs(d[i+2]-want[2]) < 30) n++;
  return n;
})()"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    store = SqliteHistory(tmp_path_factory.mktemp("history") / "history.sqlite3")
    for e in [entry(0), entry(1, pr=8), entry(2), entry(0, kind="calibration", pr=None, status="calibrated"),
              entry(2, kind="calibration", pr=None, status="calibrated", noise={"dspark_decode": 0.03, "ar_decode": 0.015})]:
        store.add(e)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(dashboard_app(store, repo="octo/dspark"), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    wait_until_healthy(base, "the dashboard")
    with Browser() as browser:
        yield base, browser
    server.should_exit = True
    thread.join(timeout=10)


def _by_chart(points):
    charts: dict[str, list[dict]] = {}
    for p in points:
        charts.setdefault(p["chart"], []).append(p)
    return charts


def _higher_is_higher(points):
    for series in {p["series"] for p in points}:
        mine = sorted((p for p in points if p["series"] == series), key=lambda p: p["value"])
        for low, high in zip(mine, mine[1:]):
            if high["value"] > low["value"]:
                assert high["y"] < low["y"], (series, low, high)


def test_overview_draws_main_per_commit_and_the_noise_floor(site):
    base, browser = site
    browser.open(base + "/dashboard")
    assert browser.evaluate("document.title").startswith("DSpark eval")
    charts = _by_chart(browser.evaluate(POINTS))
    dspark = charts["main: DSpark decode (tok/s)"]
    # three main commits, two cells each; the values are the history's
    assert sorted(p["value"] for p in dspark if p["series"] == "code@4k") == [3800.0, 3810.0, 3820.0]
    assert sorted(p["value"] for p in dspark if p["series"] == "prose@1k") == [1500.0, 1505.0, 1510.0]
    assert len(charts["main: AR decode (tok/s)"]) == 6 and len(charts["main: mean accepted τ (tokens per verify)"]) == 6
    noise = charts["noise floor (A/A calibrations) (± %)"]
    assert sorted(p["value"] for p in noise if p["series"] == "DSpark decode") == [2.0, 3.0]
    for points in charts.values():
        assert all(p["w"] > 0 and p["inside"] for p in points)
        _higher_is_higher(points)
    assert all(length > 10 for length in browser.evaluate(LINES))
    colour = tuple(int(PALETTE[0][i:i + 2], 16) for i in (1, 3, 5))
    assert browser.evaluate(PIXELS % colour, await_promise=True) > 50


def test_pull_page_draws_each_round(site):
    base, browser = site
    browser.open(base + "/dashboard/pr/7")
    points = browser.evaluate(POINTS)
    assert len(points) == 6  # two scorings of #7, three rounds each
    assert sorted(round(p["value"], 3) for p in points) == [7.0, 8.0, 9.0, 9.0, 10.0, 11.0]
    assert all(p["w"] > 0 and p["inside"] for p in points)
    highest, lowest = max(points, key=lambda p: p["value"]), min(points, key=lambda p: p["value"])
    assert highest["y"] < lowest["y"]
    assert browser.evaluate("document.querySelectorAll('svg.chart rect.interval').length") == 2
    assert browser.evaluate("document.querySelector('.scorecard table') !== null")


def test_scoring_page_links_its_receipt(site):
    base, browser = site
    e = entry(1, pr=8)
    browser.open(f"{base}/dashboard/scoring/{e.entry_id}")
    href = browser.evaluate("[...document.querySelectorAll('a')].map(a => a.href).find(h => h.includes('/receipt/'))")
    assert href.endswith(f"/dashboard/receipt/{e.entry_id}.json")
    assert httpx.get(href).text == e.receipt
