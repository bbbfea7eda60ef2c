"""Pairwise localisation: ring pairs, then a verification pair per suspect with a cleared node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checks.base import (
    FAIL,
    PASS,
    Command,
    CommandOutput,
    GroupCheck,
    GroupContext,
    GroupVerdict,
    Measurement,
    NodeContext,
)
from portal.runs.execution import _localise, ring_pairs


@dataclass
class NoOptions:
    pass


class PairCheck(GroupCheck):
    """A stand-in group check: its 'tool' prints the hostnames; a pair is bad if it holds a bad node."""

    key = "pair_test"
    name = "pair test"
    pairwise = True
    Params = NoOptions
    Thresholds = NoOptions

    def __init__(self, bad: set[str]) -> None:
        self.bad = bad

    def group_commands(self, params: Any, group: GroupContext) -> list[Command]:
        return [Command(argv=("echo", *group.hostnames), timeout=5)]

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        return [Measurement(name="hosts", text=outputs[0].stdout)]

    def evaluate_group(self, measurements: list[Measurement], thresholds: Any, group: GroupContext) -> GroupVerdict:
        slow = sorted(set(group.hostnames) & self.bad)
        return GroupVerdict(status=FAIL if slow else PASS, reason=f"slow: {slow}" if slow else "ok")


class EchoTransport:
    def __init__(self) -> None:
        self.runs: list[tuple[str, ...]] = []

    def run(self, command: Command) -> CommandOutput:
        self.runs.append(command.argv[1:])
        return CommandOutput(command, " ".join(command.argv[1:]), "", 0, False, 0.0)

    def close(self) -> None:
        pass


def group_of(n: int) -> GroupContext:
    nodes = tuple(NodeContext(hostname=f"gpu{i:02d}") for i in range(1, n + 1))
    return GroupContext(nodes=nodes, launcher=nodes[0], tag="t")


def localise(bad: set[str], n: int = 12) -> tuple[GroupVerdict, EchoTransport]:
    transport = EchoTransport()
    check = PairCheck(bad)
    _, _, verdict = _localise(check, None, None, transport, group_of(n))
    return verdict, transport


def test_it_names_the_one_node_with_a_slow_link() -> None:
    verdict, transport = localise({"gpu07"})
    assert verdict.status == FAIL
    assert {h for h, v in verdict.node_verdicts.items() if v.status == FAIL} == {"gpu07"}
    assert "gpu07" in verdict.reason
    assert verdict.node_verdicts["gpu01"].status == PASS


def test_it_clears_a_node_sitting_between_two_bad_nodes() -> None:
    verdict, transport = localise({"gpu01", "gpu03"})
    assert {h for h, v in verdict.node_verdicts.items() if v.status == FAIL} == {"gpu01", "gpu03"}
    assert verdict.node_verdicts["gpu02"].status == PASS, "gpu02 only looked bad in the ring"
    assert len(transport.runs) > 12, "verification pairs ran after the ring"


def test_it_blames_no_single_node_when_every_pair_is_slow() -> None:
    verdict, _ = localise({f"gpu{i:02d}" for i in range(1, 5)}, n=4)
    assert verdict.status == FAIL
    assert verdict.node_verdicts == {}
    assert "no single node" in verdict.reason


def test_it_pairs_every_node_twice_in_the_ring() -> None:
    pairs = ring_pairs(group_of(5).nodes)
    assert len(pairs) == 5
    for node in group_of(5).nodes:
        assert sum(node in pair for pair in pairs) == 2
