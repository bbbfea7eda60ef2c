"""Orderings the portal's pages share. One home, so a list of GPUs or hosts sorts the same on every
page and chart."""

from __future__ import annotations

import re

_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> list[int | str]:
    """A sort key that orders numbers by value: gpu2 before gpu10, node9 before node10."""
    return [int(part) if part.isdigit() else part for part in _DIGITS.split(text)]
