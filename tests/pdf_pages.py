"""Reading a rendered PDF as a person would, for the no-clipping rule of the certificate's pages.

Each page's words with their boxes (poppler's `pdftotext -bbox`, in points from the page's top-left),
and what is wrong with them: a word that runs past the printable box (A4 less base.html's 15 mm side
margins; the page number sits in the bottom margin, so vertically the page itself), or a word drawn
over another (text run into its neighbour: a cell too narrow, chart labels that collide). The same
rule as the web pages' "nothing past its column, no chart text cut off" (tests/browser/test_screenshots.py).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from html import unescape
from pathlib import Path

MM = 72 / 25.4
SIDE_MARGIN_PT = 15 * MM  # base.html: @page margin 18mm 15mm
TOLERANCE_PT = 1.0  # a glyph's box may stand a fraction of a point past its advance
# Boxes of neighbouring words touch (kerning, a bold run): overlap below this is not text on text.
OVERLAP_PT = 1.5

_PAGE = re.compile(r'<page width="([\d.]+)" height="([\d.]+)">(.*?)</page>', re.S)
_WORD = re.compile(r'<word xMin="([\d.-]+)" yMin="([\d.-]+)" xMax="([\d.-]+)" yMax="([\d.-]+)">(.*?)</word>', re.S)


@dataclass(frozen=True)
class Word:
    text: str
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Word) -> bool:
        dx = min(self.x1, other.x1) - max(self.x0, other.x0)
        dy = min(self.y1, other.y1) - max(self.y0, other.y0)
        return dx > OVERLAP_PT and dy > OVERLAP_PT


@dataclass(frozen=True)
class Page:
    number: int
    width: float
    height: float
    words: list[Word]

    def line_of(self, word: Word) -> list[Word]:
        """The words on the same line as `word` (their vertical middles within half its height), left to right."""
        middle, half = (word.y0 + word.y1) / 2, (word.y1 - word.y0) / 2
        return sorted((w for w in self.words if abs((w.y0 + w.y1) / 2 - middle) < half), key=lambda w: w.x0)


def pages(pdf: Path) -> list[Page]:
    out = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    found = []
    for number, (width, height, body) in enumerate(_PAGE.findall(out), start=1):
        words = [Word(unescape(t), float(a), float(b), float(c), float(d)) for a, b, c, d, t in _WORD.findall(body)]
        found.append(Page(number, float(width), float(height), words))
    return found


def clipping_problems(found: list[Page]) -> list[str]:
    """Every word past the printable box or drawn over another word, by page."""
    problems = []
    for page in found:
        left, right = SIDE_MARGIN_PT - TOLERANCE_PT, page.width - SIDE_MARGIN_PT + TOLERANCE_PT
        for w in page.words:
            if w.x0 < left or w.x1 > right or w.y0 < -TOLERANCE_PT or w.y1 > page.height + TOLERANCE_PT:
                where = f"x {w.x0:.1f}–{w.x1:.1f}, y {w.y0:.1f}–{w.y1:.1f}"
                box = f"x {left:.1f}–{right:.1f} of a {page.width:.0f} × {page.height:.0f} pt page"
                problems.append(f"page {page.number}: {w.text!r} at {where} past the printable box ({box})")
        ordered = sorted(page.words, key=lambda w: w.y0)
        for i, w in enumerate(ordered):
            for other in ordered[i + 1 :]:
                if other.y0 >= w.y1:
                    break
                if w.overlaps(other):
                    problems.append(f"page {page.number}: {w.text!r} and {other.text!r} are drawn over each other")
    return problems
