"""Localising a slow multi-node run by halves: which sub-runs to run next, and what they say.

Pure: no Django, no SSH. The portal (portal/runs/pairs.py) starts a `Bisection` from the group's
verdict, runs what `plan` returns (disjoint node sets, all at once), hands the verdicts to `record`,
and asks again until `plan` returns nothing or its time is up; `conclude` turns the state into the
GroupVerdict whose node_verdicts name the node(s) at fault.

The rules:
- A set that ran bad (fail, warn or error: never a pass) is split in two halves: by rack first
  when its nodes carry more than one rack (whole racks to each side, the cut nearest the middle),
  then by node. Both halves run as group tests in the same round; a half that passes clears its
  nodes, a half that does not is split again (both halves bad: both are followed).
- A half of one node cannot run a collective alone: it runs as a pair with a cleared node, a
  known-good partner. A bad set no larger than the round's free capacity is paired node by node
  at once rather than halved further. A node is named only by a pair: bad with a partner that
  passed elsewhere. Its verdict is that pair's (an unreachable node is `error`, never a pass).
- Before any node is cleared, a lone node waits for one; if none can be, it is tried with another
  suspect (each pair once). No pass in BLIND_LIMIT bad sub-runs: no single node is to blame.
- One slow node among N is named in about log2(N / capacity) + 1 rounds; several slow nodes
  share the rounds while the capacity lasts.
- `conclude` never passes what it did not clear: nodes still suspect when the time ran out (or
  no partner could be found) are `error` "not localised", and the reason says so; sets that are
  slow only as a whole (every part passes alone) are named in the reason.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from checks.core.verdict import ERROR, FAIL, PASS, GroupVerdict, Verdict, worst_status

# Bad sub-runs without a single pass before the search stops: with every one of them slow (the
# halves of the halves...), the fault is not one node's, or there are more slow nodes than a
# search by halves can name in a few rounds (a fabric or switch problem). Kiln's choice.
BLIND_LIMIT = 8
# The group task's time budget covers naming this many slow nodes spread over the group (each bad
# set takes two sub-runs a round: four fill the default 8 at once); past that the deadline may cut
# the search short, and the verdict says what was not localised. Kiln's choice.
BUDGETED_SLOW_NODES = 4
# Rounds added to the budget because racks are kept whole: an uneven cut by rack can leave a
# larger half than a cut by node, about one level more in practice. Kiln's choice.
RACK_MARGIN_ROUNDS = 2

# How a suspect set is divided in a round: run as it is, in two halves, or node by node (pairs).
WHOLE, HALVES, NODES = "whole", "halves", "nodes"


@dataclass(frozen=True)
class SubRun:
    """One run of the check on a subset: `nodes`, for the suspects `part` of `state.items[item]`.
    A pair (`partner` set) tests one suspect with a partner that is not one of the suspects."""

    nodes: tuple[str, ...]
    item: int
    part: tuple[str, ...]
    partner: str = ""
    split: str = WHOLE  # how the item was divided this round: WHOLE, HALVES or NODES

    @property
    def is_pair(self) -> bool:
        return bool(self.partner)


@dataclass(frozen=True)
class Ran:
    """A sub-run that ran, in which round, with its verdict."""

    round: int
    nodes: tuple[str, ...]
    verdict: Verdict
    partner: str = ""

    @property
    def bad(self) -> bool:
        return self.verdict.status != PASS

    def describe(self) -> str:
        return f"round {self.round} ({_names(self.nodes)})"


@dataclass
class Suspects:
    """Nodes not cleared yet. `bad`: they ran together and were not within spec (split next);
    otherwise they have not run on their own yet (run next)."""

    nodes: tuple[str, ...]
    bad: bool


@dataclass
class Bisection:
    """Where one localisation stands."""

    group: tuple[str, ...]
    root: Verdict
    racks: dict[str, str] = field(default_factory=dict)
    items: list[Suspects] = field(default_factory=list)
    cleared: dict[str, str] = field(default_factory=dict)  # node -> the passing sub-run
    named: dict[str, Verdict] = field(default_factory=dict)
    runs: list[Ran] = field(default_factory=list)
    rounds: int = 0


def start(nodes: Sequence[str], root: Verdict, racks: Mapping[str, str] | None = None) -> Bisection:
    """A localisation of `nodes`, whose run together gave `root`: nothing to do when it passed."""
    group = tuple(nodes)
    state = Bisection(group=group, root=root, racks={n: r for n, r in (racks or {}).items() if r})
    if root.status != PASS and len(group) >= 2:
        state.items = [Suspects(group, bad=True)]
    return state


def halves(nodes: Sequence[str], racks: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Two halves of `nodes`: whole racks to each side (the cut nearest the middle) when they span
    racks, else the first and second half in the given order (the larger first)."""
    by_rack: dict[str, list[str]] = {}
    for node in nodes:
        by_rack.setdefault(racks.get(node, ""), []).append(node)
    if len(by_rack) < 2:
        middle = (len(nodes) + 1) // 2
        return tuple(nodes[:middle]), tuple(nodes[middle:])
    ordered = [by_rack[rack] for rack in sorted(by_rack, key=_natural)]
    sizes = [len(members) for members in ordered]
    cut = min(range(1, len(ordered)), key=lambda k: abs(2 * sum(sizes[:k]) - len(nodes)))
    return tuple(n for members in ordered[:cut] for n in members), tuple(
        n for members in ordered[cut:] for n in members
    )


def pieces(item: Suspects, split: str, racks: Mapping[str, str]) -> Sequence[tuple[str, ...]]:
    """The parts of a suspect set under `split`: itself, its two halves, or its nodes one by one."""
    if split == HALVES:
        return halves(item.nodes, racks)
    if split == NODES:
        return [(node,) for node in item.nodes]
    return [item.nodes]


def _natural(text: str) -> list[object]:
    """Sort key that puts rack2 before rack10."""
    return [int(piece) if piece.isdigit() else piece for piece in re.split(r"(\d+)", text)]


class _Round:
    """The sub-runs of one round being planned: disjoint, at most `capacity`."""

    def __init__(self, state: Bisection, capacity: int) -> None:
        self.state, self.capacity = state, max(1, capacity)
        self.runs: list[SubRun] = []
        self.busy: set[str] = set()
        self.lonely: list[tuple[int, str, str]] = []  # (item, node, split) left without a cleared partner

    @property
    def free(self) -> int:
        return self.capacity - len(self.runs)

    def add(self, run: SubRun) -> None:
        self.runs.append(run)
        self.busy.update(run.nodes)

    def idle_cleared(self, near: str) -> list[str]:
        rack = self.state.racks.get(near, "")
        idle = [n for n in self.state.cleared if n not in self.busy]
        return sorted(idle, key=lambda n: (self.state.racks.get(n, "") != rack, n))

    def pair_with_cleared(self, index: int, node: str, split: str) -> bool:
        partner = next(iter(self.idle_cleared(node)), "")
        if not partner:
            return False
        self.add(SubRun((node, partner), index, (node,), partner, split))
        return True

    def plan_item(self, index: int, item: Suspects) -> None:
        if self.free <= 0 or self.busy.intersection(item.nodes):
            return
        if item.bad and 2 <= len(item.nodes) <= self.free and len(self.idle_cleared(item.nodes[0])) >= len(item.nodes):
            for node in item.nodes:  # small enough to verify every node at once
                self.pair_with_cleared(index, node, NODES)
            return
        split = HALVES if item.bad and len(item.nodes) > 1 else WHOLE
        for part in pieces(item, split, self.state.racks):
            if self.free <= 0:
                return
            if len(part) > 1:
                self.add(SubRun(part, index, part, split=split))
            elif not self.pair_with_cleared(index, part[0], split):
                self.lonely.append((index, part[0], split))

    def plan_fallbacks(self) -> None:
        """Lone nodes with no cleared node to pair with: try another suspect, each pair once."""
        tried = {frozenset(r.nodes) for r in self.state.runs if len(r.nodes) == 2}
        tried.add(frozenset(self.state.group))  # a group of two ran as that pair already
        suspects = [n for item in self.state.items for n in item.nodes]
        for index, node, split in self.lonely:
            if self.free <= 0 or node in self.busy:
                continue
            others = [n for n in suspects if n != node and n not in self.busy and frozenset((node, n)) not in tried]
            if others:
                self.add(SubRun((node, others[0]), index, (node,), others[0], split))


def plan(state: Bisection, *, capacity: int) -> list[SubRun]:
    """The next round: disjoint sub-runs, at most `capacity`; none when the search is over (nothing
    left to localise, or nothing that can still tell: see `conclude`)."""
    if not state.items or blind(state):
        return []
    planned = _Round(state, capacity)
    for index, item in enumerate(state.items):
        planned.plan_item(index, item)
    if not state.cleared:
        planned.plan_fallbacks()
    return planned.runs


def blind(state: Bisection) -> bool:
    """BLIND_LIMIT bad sub-runs and not one pass: the search stops."""
    return not state.cleared and sum(r.bad for r in state.runs) >= BLIND_LIMIT


def record(state: Bisection, done: Sequence[tuple[SubRun, Verdict]]) -> None:
    """What one round's sub-runs said. Sub-runs planned but not run (the launcher refused them)
    are simply absent: their suspects stay as they were and are planned again."""
    if not done:
        return
    state.rounds += 1
    for run, verdict in done:
        ran = Ran(state.rounds, run.nodes, verdict, run.partner)
        state.runs.append(ran)
        if verdict.status == PASS:
            where = ran.describe()
            for node in run.nodes:
                state.cleared.setdefault(node, where)
    outcome = {(run.item, run.part): verdict for run, verdict in done}
    splits = {run.item: run.split for run, _ in done}
    items: list[Suspects] = []
    for index, item in enumerate(state.items):
        split = splits.get(index)
        items.extend([item] if split is None else _after(state, index, item, split, outcome))
    state.items = items
    _settle(state)


def _after(
    state: Bisection,
    index: int,
    item: Suspects,
    split: str,
    outcome: Mapping[tuple[int, tuple[str, ...]], Verdict],
) -> list[Suspects]:
    """What becomes of one suspect set after a round: its parts that ran bad (split next), those
    that did not run (run next); the ones that passed are gone (cleared)."""
    after = []
    for part in pieces(item, split, state.racks):
        verdict = outcome.get((index, part))
        if verdict is None:
            after.append(Suspects(part, bad=False))
        elif verdict.status != PASS:
            after.append(Suspects(part, bad=len(part) > 1))
    return after


def _settle(state: Bisection) -> None:
    """Cleared nodes leave the suspects; a suspect bad in a pair with a cleared node is named."""
    for node, run in _pairs_with_cleared(state):
        state.named.setdefault(node, _named_verdict(node, run, state))
    gone = set(state.cleared) | set(state.named)
    items = []
    for item in state.items:
        nodes = tuple(n for n in item.nodes if n not in gone)
        if nodes:
            items.append(Suspects(nodes, bad=item.bad))
    state.items = items


def _pairs_with_cleared(state: Bisection) -> Iterable[tuple[str, Ran]]:
    for run in state.runs:
        if not run.bad or len(run.nodes) != 2:
            continue
        for node, peer in (run.nodes, run.nodes[::-1]):
            if node not in state.cleared and peer in state.cleared:
                yield node, run


def _named_verdict(node: str, run: Ran, state: Bisection) -> Verdict:
    peer = run.nodes[1] if run.nodes[0] == node else run.nodes[0]
    how = "slow or failing" if run.verdict.status != ERROR else "could not run"
    reason = f"{how} with a known-good partner, {peer} (within spec in {state.cleared[peer]}): {run.verdict.reason}"
    return Verdict(status=run.verdict.status, reason=reason[:1000])


def conclude(state: Bisection, *, cut_short: bool = False) -> GroupVerdict:
    """The localisation's verdict: the named nodes with their pairs' verdicts, the cleared ones
    passed, and what was not localised (never silently: `error` per node and in the reason)."""
    if not state.runs:
        return _nothing_ran(state, cut_short=cut_short)
    left = sorted({n for item in state.items for n in item.nodes})
    parts = _reason_parts(state, left, cut_short=cut_short)
    node_verdicts: dict[str, Verdict] = {}
    if state.named or state.cleared:
        node_verdicts.update(
            {n: Verdict(status=PASS, reason=f"within spec in {how}") for n, how in state.cleared.items()}
        )
        node_verdicts.update(state.named)
        why = _not_localised_why(state, cut_short=cut_short)
        node_verdicts.update({n: Verdict(status=ERROR, reason=f"not localised: {why}") for n in left})
    bad = [r.verdict.status for r in state.runs if r.bad]
    if state.named:
        status = worst_status([v.status for v in state.named.values()])
    else:
        status = worst_status(bad) if bad else PASS
    return GroupVerdict(status=status, reason="; ".join(parts), node_verdicts=dict(sorted(node_verdicts.items())))


def _nothing_ran(state: Bisection, *, cut_short: bool) -> GroupVerdict:
    if state.root.status == PASS:
        return GroupVerdict(status=PASS, reason="the group is within spec: nothing to localise")
    if cut_short:
        why = "localisation cut short by the task's time budget before its first sub-run"
    else:
        why = f"{len(state.group)} node(s) cannot be split and paired with a known-good node"
    return GroupVerdict(status=ERROR, reason=f"no sub-run was run: {why}; nothing localised")


def _reason_parts(state: Bisection, left: list[str], *, cut_short: bool) -> list[str]:
    count = f"{len(state.runs)} sub-run(s) in {state.rounds} round(s)"
    parts = []
    if state.named:
        parts.append(f"localised to {_names(sorted(state.named))} by halves ({count}): bad with a known-good partner")
    if left:
        parts.append(
            f"not localised: {_names(left)} ({len(left)} node(s)): {_not_localised_why(state, cut_short=cut_short)}"
        )
    together = _slow_together(state)
    if together:
        shown = ", ".join(_names(r.nodes) for r in together[:4]) + (" ..." if len(together) > 4 else "")
        parts.append(f"slow only together: {shown} (each part passes on its own; the fabric between them?)")
    if not parts:
        parts.append(f"every part passes ({count})")
    return parts


def _not_localised_why(state: Bisection, *, cut_short: bool) -> str:
    if cut_short:
        return f"localisation cut short by the task's time budget after {state.rounds} round(s)"
    if not state.cleared:
        bad = sum(r.bad for r in state.runs)
        return f"no sub-run passed ({bad} tried): no single node is to blame (fabric-wide?)"
    return "no known-good partner could be paired with it"


def _slow_together(state: Bisection) -> list[Ran]:
    """Bad runs (the whole group too) that no named or unresolved node explains."""
    suspects = set(state.named) | {n for item in state.items for n in item.nodes}
    root = Ran(0, state.group, state.root)
    runs = ([root] if state.root.status != PASS else []) + [r for r in state.runs if r.bad]
    unexplained = [r for r in runs if not suspects.intersection(r.nodes)]
    # The smallest such sets say most: leave out those that hold another one.
    sets = [set(r.nodes) for r in unexplained]
    return [r for r, nodes in zip(unexplained, sets, strict=True) if not any(o < nodes for o in sets)]


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def _names(nodes: Sequence[str], limit: int = 6) -> str:
    """Hostnames folded into ranges where they are numbered alike (gpu[01-16]), the first `limit`
    ranges or names shown."""
    runs: list[tuple[str, int, int, int]] = []  # prefix, width, first, last
    plain: list[str] = []
    for name in nodes:
        match = _NUMBERED.match(name)
        if not match:
            plain.append(name)
            continue
        prefix, digits = match.groups()
        number, width = int(digits), len(digits)
        last = runs[-1] if runs else None
        if last and last[0] == prefix and last[1] == width and last[3] + 1 == number:
            runs[-1] = (prefix, width, last[2], number)
        else:
            runs.append((prefix, width, number, number))
    shown = [_span(*run) for run in runs] + plain
    text = ", ".join(shown[:limit])
    return text + (f" and {len(shown) - limit} more" if len(shown) > limit else "")


def _span(prefix: str, width: int, first: int, last: int) -> str:
    if first == last:
        return f"{prefix}{first:0{width}d}"
    return f"{prefix}[{first:0{width}d}-{last:0{width}d}]"


# --- budgeting --------------------------------------------------------------------------------


def simulate(
    nodes: Sequence[str],
    is_bad: Callable[[tuple[str, ...]], bool],
    *,
    capacity: int,
    racks: Mapping[str, str] | None = None,
    max_rounds: int | None = None,
) -> Bisection:
    """The whole search against a model of the cluster (`is_bad(nodes)`: does a run of these nodes
    fail?): for budgets, tests and benchmarks."""
    group = tuple(nodes)
    root = Verdict(status=FAIL if is_bad(group) else PASS, reason="")
    state = start(group, root, racks)
    limit = max_rounds if max_rounds is not None else 4 * len(group) + 8
    while state.rounds < limit:
        runs = plan(state, capacity=capacity)
        if not runs:
            break
        record(state, [(r, Verdict(status=FAIL if is_bad(r.nodes) else PASS, reason="")) for r in runs])
    return state


@lru_cache(maxsize=256)
def budget_rounds(node_count: int, *, capacity: int) -> int:
    """Rounds of sub-runs a group task budgets for after its group run: the search naming
    BUDGETED_SLOW_NODES slow nodes spread over `node_count` nodes, plus RACK_MARGIN_ROUNDS."""
    if node_count < 3:
        return 0
    nodes = [f"n{i}" for i in range(node_count)]
    slow_count = min(BUDGETED_SLOW_NODES, node_count - 1)
    step = node_count / slow_count
    slow = {nodes[math.floor(i * step + step / 2)] for i in range(slow_count)}
    state = simulate(nodes, lambda ran: bool(slow.intersection(ran)), capacity=capacity)
    return state.rounds + RACK_MARGIN_ROUNDS
