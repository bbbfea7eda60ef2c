"""Parsers of captured tool outputs, by kind, for `python -m checks parse KIND FILE`.

Each check module registers the parsers of the tools it reads. A parser takes the whole text of
one output and returns its measurements and warnings; it raises EvidenceError when the text cannot
be parsed at all (the CLI then exits 2 with that one-line reason).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from checks.base import Measurement


@dataclass
class Parsed:
    measurements: list[Measurement]
    warnings: list[str] = field(default_factory=list)


Parser = Callable[[str], Parsed]
PARSERS: dict[str, Parser] = {}


def register_parser(kind: str) -> Callable[[Parser], Parser]:
    def wrap(func: Parser) -> Parser:
        if kind in PARSERS:
            raise ValueError(f"parser kind {kind!r} registered twice")
        PARSERS[kind] = func
        return func

    return wrap
