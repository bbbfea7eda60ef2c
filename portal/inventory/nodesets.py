"""Node sets typed by people (`gpu[001-128,130]`), parsed with a bound on their size.

ClusterShell expands a node set while parsing it: `NodeSet("gpu[1-10000000]")` builds ten million
names (about 4 s, and 20 s more to list them; 1.7 GB in one web worker). So every node set that comes
from a request, a form or a command goes through `parse()` here, which first bounds the number of
names from the text alone (each range's bounds and step: arithmetic on a few integers, nothing
expanded) and refuses a set over the limit before ClusterShell sees it. Group syntax (`@name`) is not
resolved: a typed node set never consults ClusterShell's group sources (an admin's `groups.conf` may
run commands).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException
from ClusterShell.RangeSet import RangeSetException
from django.conf import settings

# The longest node set text a form or the API accepts, in characters: the REST API's bound since it
# was written, now shared with the pages. parse() bounds the names such a text may expand to.
MAX_TEXT = 10_000


class NodeSetError(ValueError):
    """Not a node set Kiln accepts; the message says why, in words for the person who typed it."""


class NodeSetTooLarge(NodeSetError):
    """The node set names more nodes than `KILN_MAX_NODESET` (refused before anything is expanded)."""

    def __init__(self, bound: int, limit: int) -> None:
        self.bound = bound
        self.limit = limit
        super().__init__(
            f"its ranges span more than {limit:,} nodes, the most a node set may name (KILN_MAX_NODESET): narrow it"
        )


# Outside brackets: a bracketed range list, an operator (ClusterShell's `,` union, `!` difference,
# `&` intersection, `^` symmetric difference), a run of plain name text, or a stray bracket.
_TOKEN = re.compile(r"\[([^\[\]]*)\]|([,!&^])|([^\[\],!&^]+)|(.)", re.DOTALL)
# One element of a range list: `7`, `01-64`, `1-100/2`, and ClusterShell's negative forms `-5`,
# `-0-3`, `-8--4`. ASCII digits only: Python's int() would also take `1_000` and other scripts' digits.
_RANGE = re.compile(r"\s*(-?[0-9]+)\s*(?:-\s*(-?[0-9]+)\s*)?(?:/\s*([0-9]+)\s*)?", re.ASCII)
# A bound this large is already refused; past it the arithmetic is not worth finishing.
_DIGITS_MAX = 120


def count_bound(text: str, *, stop_above: int | None = None) -> int:
    """An upper bound on the number of nodes `text` names, computed without expanding it.

    Each term (a name with zero or more bracketed range lists) names at most the product of its
    ranges' sizes; the set names at most the sum over its terms (a union is no larger than the sum, a
    difference or intersection no larger than its left side). The bound is exact for a union of
    disjoint terms, which is what people type. `stop_above`: return as soon as the bound exceeds it.
    Raises NodeSetError on text that is not a node set (unbalanced brackets, a malformed range)."""
    total = 0
    product = 1
    in_term = False
    for match in _TOKEN.finditer(text):
        ranges, operator, plain, stray = match.groups()
        if stray is not None:
            raise NodeSetError(f"unbalanced bracket {stray!r} at character {match.start() + 1}")
        if operator is not None:
            if not in_term:
                raise NodeSetError(f"{operator!r} at character {match.start() + 1} has no node before it")
            total += product
            product, in_term = 1, False
        elif ranges is not None:
            product *= _range_count(ranges, stop_above=stop_above)
            in_term = True
        elif plain.strip():
            in_term = True
        if stop_above is not None and total + (product if in_term else 0) > stop_above:
            return total + product
    if in_term:
        total += product
    elif total:
        raise NodeSetError("the node set ends with an operator and no node after it")
    return total


def _elements(ranges: str) -> Iterator[str]:
    """The comma-separated elements of a range list, one at a time (a 100,000-element list is not
    split into a list first: the count stops as soon as it is over the limit)."""
    start = 0
    while (end := ranges.find(",", start)) >= 0:
        yield ranges[start:end]
        start = end + 1
    yield ranges[start:]


def _range_count(ranges: str, *, stop_above: int | None = None) -> int:
    """How many indexes one bracket's range list holds (an upper bound: overlaps count twice)."""
    shown = ranges if len(ranges) <= 40 else ranges[:37] + "..."
    count = 0
    for element in _elements(ranges):
        match = _RANGE.fullmatch(element)
        if match is None:
            raise NodeSetError(f"[{shown}]: {element.strip()[:40]!r} is not a number or a range like 1-8 or 1-8/2")
        first, last, step = match.groups()
        if max(len(first), len(last or ""), len(step or "")) > _DIGITS_MAX:
            raise NodeSetError(f"[{shown}]: a number has more than {_DIGITS_MAX} digits")
        if last is None:
            if step is not None and int(step) != 1:
                raise NodeSetError(f"[{shown}]: a step needs a range ({element.strip()!r})")
            count += 1
        else:
            low, high, by = int(first), int(last), int(step or 1)
            if by < 1:
                raise NodeSetError(f"[{shown}]: the step of {element.strip()!r} must be at least 1")
            if high < low:
                raise NodeSetError(f"[{shown}]: {element.strip()!r} ends before it starts")
            count += (high - low) // by + 1
        if stop_above is not None and count > stop_above:
            break
    return count


def max_nodes() -> int:
    return int(settings.KILN_MAX_NODESET)


def parse(text: str, *, limit: int | None = None) -> NodeSet:
    """The NodeSet `text` names, refusing (NodeSetTooLarge) one that would name more than `limit`
    nodes (default: KILN_MAX_NODESET) before expanding anything, and a malformed one (NodeSetError)."""
    limit = max_nodes() if limit is None else limit
    bound = count_bound(text, stop_above=limit)
    if bound > limit:
        raise NodeSetTooLarge(bound, limit)
    try:
        return NodeSet(text, resolver=RESOLVER_NOGROUP)
    except (NodeSetException, RangeSetException, ValueError) as exc:
        raise NodeSetError(str(exc) or type(exc).__name__) from None


def expand(text: str, *, limit: int | None = None) -> list[str]:
    """The names `text` names, in ClusterShell's order (bounded as in `parse`)."""
    return list(parse(text, limit=limit))
