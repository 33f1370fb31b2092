"""The dashboard's pages, from history entries only (`evalbot.history.schema`): main's figures per
commit, each PR's scorings with their rounds, the noise floor over time, one page per scoring.

Pure: entries in, HTML out (templates `dashboard_*.html.j2`, autoescaped; charts from
`report.charts`). The web routes that serve these pages are in `evalbot.bot.dashboard`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from statistics import median
from typing import Any

import jinja2
from markdown_it import MarkdownIt
from markupsafe import Markup

from evalbot.history.schema import HistoryEntry
from evalbot.report.charts import Group, Series, line_chart, strip_chart
from evalbot.report.render import TEMPLATES_DIR, pct, short

NOISE_NAMES = {"dspark_decode": "DSpark decode", "ar_decode": "AR decode", "ar_cell": "AR decode, one cell",
               "guard_decode": "guard decode",
               "guard_prefill": "guard prefill"}
# Harmless tags the scorecards use; everything else in a scorecard is shown as text, never as HTML.
_ALLOWED_TAGS = ("sub", "details", "summary")


@lru_cache(maxsize=4)
def _environment(root: str) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(root), undefined=jinja2.StrictUndefined, autoescape=True,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(short=short, pct=pct, cell_name=cell_name)
    return env


def render_page(template: str, templates: Path | None = None, **context: Any) -> str:
    return _environment(str(templates or TEMPLATES_DIR)).get_template(template).render(**context)


def cell_name(corpus: str, ctx: int) -> str:
    return f"{corpus}@{ctx // 1024}k" if ctx >= 1024 and ctx % 1024 == 0 else f"{corpus}@{ctx}"


def markdown_html(text: str) -> Markup:
    """A scorecard (CommonMark + tables) as HTML; raw HTML in it is escaped, but for a few harmless tags."""
    lines = [line for line in text.splitlines() if not (line.startswith("<!--") and line.endswith("-->"))]
    html = MarkdownIt("commonmark", {"html": False}).enable("table").render("\n".join(lines))
    for tag in _ALLOWED_TAGS:
        html = html.replace(f"&lt;{tag}&gt;", f"<{tag}>").replace(f"&lt;/{tag}&gt;", f"</{tag}>")
    return Markup(html)


# ---------------------------------------------------------------------------------------------
# Views of the history


@dataclass
class MainCommit:
    sha: str
    first_seen: str
    figures: dict[str, dict[str, float]] = field(default_factory=dict)  # cell -> metric -> median over scorings


def main_commits(entries: list[HistoryEntry], profile: str, box: str) -> list[MainCommit]:
    """Main's own figures per commit (median over every scoring against it), oldest commit first."""
    by_sha: dict[str, MainCommit] = {}
    samples: dict[str, dict[str, dict[str, list[float]]]] = {}
    for e in entries:
        if e.kind != "score" or e.profile != profile or e.box != box or not e.cells:
            continue
        commit = by_sha.setdefault(e.base_sha, MainCommit(e.base_sha, e.finished_at))
        for c in e.cells:
            metrics = samples.setdefault(commit.sha, {}).setdefault(cell_name(c.corpus, c.ctx), {})
            for metric, value in (("dspark_tps", c.main_dspark_tps), ("ar_tps", c.main_ar_tps), ("tau", c.main_tau)):
                if value is not None:
                    metrics.setdefault(metric, []).append(value)
    for sha, cells in samples.items():
        by_sha[sha].figures = {cell: {m: median(v) for m, v in metrics.items()} for cell, metrics in cells.items()}
    return sorted(by_sha.values(), key=lambda c: c.first_seen)


def main_charts(commits: list[MainCommit]) -> list[Markup]:
    labels = [short(c.sha, 7) for c in commits]
    tooltips = [f"main {short(c.sha)} (first scored {c.first_seen})" for c in commits]
    cells = sorted({cell for c in commits for cell in c.figures}, key=_cell_order)
    charts = []
    for metric, title, unit in (("dspark_tps", "main: DSpark decode", "tok/s"), ("ar_tps", "main: AR decode", "tok/s"),
                                ("tau", "main: mean accepted τ", "tokens per verify")):
        series = [Series(cell, [c.figures.get(cell, {}).get(metric) for c in commits]) for cell in cells]
        charts.append(Markup(line_chart(title, labels, series, y_label=unit, tooltips=tooltips)))
    return charts


def _cell_order(name: str) -> tuple:
    corpus, _, ctx = name.rpartition("@")
    size = int(ctx[:-1]) * 1024 if ctx.endswith("k") else int(ctx or 0)
    return (size, corpus)


def noise_chart(calibrations: list[HistoryEntry]) -> Markup:
    labels = [c.finished_at[:10] for c in calibrations]
    tooltips = [f"{c.finished_at} on {c.box} ({c.profile}), main {short(c.base_sha)}" for c in calibrations]
    metrics = [m for m in NOISE_NAMES if any(m in c.noise for c in calibrations)]
    series = [Series(NOISE_NAMES[m], [c.noise[m] * 100 if m in c.noise else None for c in calibrations]) for m in metrics]
    return Markup(line_chart("noise floor (A/A calibrations)", labels, series, y_label="± %", tooltips=tooltips))


def rounds_chart(scorings: list[HistoryEntry], title: str = "DSpark decode speedup per round") -> Markup:
    groups = [
        Group(label=f"{short(e.head_sha, 7)}/{short(e.base_sha, 7)}", values=[(r - 1) * 100 for r in e.rounds],
              interval=(e.ci_low_pct, e.ci_high_pct) if e.ci_low_pct is not None and e.ci_high_pct is not None else None)
        for e in scorings
    ]
    noise = max((e.noise.get("dspark_decode", 0.0) for e in scorings), default=0.0) * 100
    band = (-noise, noise, f"noise floor ±{noise:.1f}%") if noise else None
    return Markup(strip_chart(title, groups, y_label="% vs main", reference=(0.0, "0 %"), band=band))


def _pairs(entries: list[HistoryEntry]) -> list[tuple[str, str]]:
    return sorted({(e.profile, e.box) for e in entries if e.kind == "score" and e.cells})


def latest_per_pull(entries: list[HistoryEntry]) -> list[HistoryEntry]:
    latest: dict[int, HistoryEntry] = {}
    for e in entries:
        if e.kind == "score" and e.pr_number is not None:
            latest[e.pr_number] = e
    return sorted(latest.values(), key=lambda e: e.finished_at, reverse=True)


# ---------------------------------------------------------------------------------------------
# Pages


def overview_page(entries: list[HistoryEntry], *, repo: str, base: str = "", templates: Path | None = None) -> str:
    calibrations = [e for e in entries if e.kind == "calibration"]
    sections = []
    for profile, box in _pairs(entries):
        commits = main_commits(entries, profile, box)
        sections.append({"profile": profile, "box": box, "commits": commits, "charts": main_charts(commits)})
    scorings = [e for e in entries if e.kind == "score"]
    return render_page(
        "dashboard_overview.html.j2", templates, repo=repo, base=base, sections=sections,
        noise=noise_chart(calibrations) if calibrations else None, calibrations=calibrations[-10:][::-1],
        pulls=latest_per_pull(entries), recent=scorings[-20:][::-1], total=len(entries),
    )


def pull_page(entries: list[HistoryEntry], number: int, *, repo: str, base: str = "", templates: Path | None = None) -> str:
    scorings = [e for e in entries if e.kind == "score" and e.pr_number == number]
    with_rounds = [e for e in scorings if e.rounds]
    return render_page(
        "dashboard_pull.html.j2", templates, repo=repo, base=base, number=number, scorings=scorings[::-1],
        chart=rounds_chart(with_rounds, f"#{number}: DSpark decode speedup per round") if with_rounds else None,
        markdown=markdown_html,
    )


def entry_page(entry: HistoryEntry, *, repo: str, base: str = "", templates: Path | None = None) -> str:
    return render_page(
        "dashboard_entry.html.j2", templates, repo=repo, base=base, e=entry,
        chart=rounds_chart([entry]) if entry.rounds else None, markdown=markdown_html,
    )


def missing_page(what: str, *, repo: str, base: str = "", templates: Path | None = None) -> str:
    return render_page("dashboard_missing.html.j2", templates, repo=repo, base=base, what=what)
