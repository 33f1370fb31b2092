"""Rebuild harness/prompts/code.txt and prose.txt, the ruler's text corpora, from two Debian packages.

    python bench/build_corpora.py [--debs DIR]     # DIR holds (or receives, via apt-get download) the .debs

- code.txt: Python source of Django 3.2 (Debian `python3-django`, BSD-3-Clause), whole files in path
  order, each after a one-line path comment, until CODE_BYTES.
- prose.txt: the PostgreSQL 15 documentation (Debian `postgresql-doc-15`, PostgreSQL License), the
  running text of its HTML pages (paragraphs, lists and headings; code listings, tables and navigation
  dropped), pages in file-name order, until PROSE_BYTES.

Why these: real text, large enough that the bot can draw hundreds of never-repeated exact-length
windows per scoring (docs/harness.md), and neither is the shipped drafter's training data (CPython's
standard library and the Python documentation) nor installed in any Python environment the measured
processes can read (a source that sits in site-packages could be read back as a lookup table).
"""

from __future__ import annotations

import argparse
import html
import re
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "harness" / "prompts"
CODE_BYTES = 2_400_000
PROSE_BYTES = 2_200_000
PACKAGES = {"code": "python3-django", "prose": "postgresql-doc-15"}


def fetch(debs: Path, package: str) -> Path:
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        subprocess.run(["apt-get", "download", package], cwd=debs, check=True)
        found = sorted(debs.glob(f"{package}_*.deb"))
    return found[-1]


def unpack(deb: Path, into: Path) -> Path:
    subprocess.run(["dpkg-deb", "-x", str(deb), str(into)], check=True)
    return into


def build_code(root: Path) -> str:
    base = next(root.glob("usr/lib/python3/dist-packages/django"))
    parts, size = [], 0
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base.parent).as_posix()
        if "/migrations/" in rel or "/locale/" in rel:
            continue
        text = path.read_text(encoding="utf-8")
        if len(text) < 2000:
            continue
        chunk = f"# {rel}\n{text.rstrip()}\n\n"
        if size + len(chunk) > CODE_BYTES:
            break
        parts.append(chunk)
        size += len(chunk)
    return "".join(parts)


class _Prose(HTMLParser):
    """Running text of one DocBook HTML page."""

    SKIP = {"pre", "table", "script", "style"}
    BLOCK = {"p", "li", "h1", "h2", "h3", "h4", "dt", "dd", "blockquote"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self.buf: list[str] = []
        self.skip = 0
        self.nav = 0

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class", "") or ""
        if tag == "div" and ("navheader" in cls or "navfooter" in cls or cls == "toc"):
            self.nav += 1
        elif self.nav and tag == "div":
            self.nav += 1
        if tag in self.SKIP:
            self.skip += 1
        if tag in self.BLOCK:
            self._flush()

    def handle_endtag(self, tag):
        if tag == "div" and self.nav:
            self.nav -= 1
        if tag in self.SKIP and self.skip:
            self.skip -= 1
        if tag in self.BLOCK:
            self._flush()

    def handle_data(self, data):
        if not self.skip and not self.nav:
            self.buf.append(data)

    def _flush(self):
        text = re.sub(r"\s+", " ", html.unescape("".join(self.buf))).strip()
        self.buf = []
        if len(text) > 1 and (not self.blocks or self.blocks[-1] != text):
            self.blocks.append(text)


def build_prose(root: Path) -> str:
    base = next(root.glob("usr/share/doc/postgresql-doc-15/html"))
    parts, size = [], 0
    for path in sorted(base.glob("*.html")):
        parser = _Prose()
        parser.feed(path.read_text(encoding="utf-8", errors="replace"))
        parser._flush()
        words = sum(len(b.split()) for b in parser.blocks)
        if words < 400:  # index pages, one-line stubs
            continue
        chunk = "\n\n".join(parser.blocks) + "\n\n"
        if size + len(chunk) > PROSE_BYTES:
            break
        parts.append(chunk)
        size += len(chunk)
    return "".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--debs", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        debs = args.debs or Path(tmp)
        debs.mkdir(parents=True, exist_ok=True)
        for kind, build in (("code", build_code), ("prose", build_prose)):
            deb = fetch(debs, PACKAGES[kind])
            text = build(unpack(deb, Path(tmp) / kind))
            (OUT / f"{kind}.txt").write_text(text, encoding="utf-8")
            print(f"{kind}.txt: {len(text):,} bytes from {deb.name}")


if __name__ == "__main__":
    main()
