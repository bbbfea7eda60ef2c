"""Pairwise localisation: ring pairs, then a verification pair per suspect with a cleared node."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

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
from portal.runs import pairs
from portal.runs.pairs import localise as _localise
from portal.runs.pairs import pair_batches, pair_run_budget, ring_pairs
from worker.ssh import SessionRefusedError
from worker.timeouts import group_task_limits


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


@pytest.mark.parametrize("n", [3, 4, 5, 12, 13, 64, 1250])
@pytest.mark.parametrize("parallelism", [1, 3, 8])
def test_its_batches_are_disjoint_bounded_and_cover_every_pair_once(n: int, parallelism: int) -> None:
    pairs = ring_pairs(list(range(n)))
    batches = pair_batches(pairs, parallelism)
    assert sorted(p for b in batches for p in b) == sorted(pairs)
    for batch in batches:
        assert 1 <= len(batch) <= parallelism
        members = [node for pair in batch for node in pair]
        assert len(members) == len(set(members)), f"a node in two concurrent pairs: {batch}"
    if n % 2 == 0 and parallelism == 8:
        assert len(batches) == 2 * -(-n // 16), "an even ring is two perfect matchings"


class ConcurrentEchoTransport(EchoTransport):
    """Records how many pair runs overlap, and fails if one node is in two of them at once.

    The first two runs wait for each other at a barrier: run concurrently they meet; run one after
    the other the first waits alone, the barrier breaks and `met` says so. No sleep, no time bound."""

    # Only a guard against a hang when the runs are sequential; meeting takes microseconds.
    MEET_TIMEOUT_S = 30

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.busy: set[str] = set()
        self.most_at_once = 0
        self.started = 0
        self.meet = threading.Barrier(2, timeout=self.MEET_TIMEOUT_S)
        self.met = False

    def run(self, command: Command) -> CommandOutput:
        hosts = set(command.argv[1:])
        with self.lock:
            assert not hosts & self.busy, f"{hosts & self.busy} in two concurrent pair runs"
            self.busy |= hosts
            self.most_at_once = max(self.most_at_once, len(self.busy) // 2)
            self.started += 1
            first_two = self.started <= 2
        if first_two:
            try:
                self.meet.wait()
                self.met = True
            except threading.BrokenBarrierError:
                pass
        with self.lock:
            self.busy -= hosts
        return super().run(command)


def test_it_runs_disjoint_pairs_at_once_with_the_same_verdict() -> None:
    sequential, _ = localise({"gpu01", "gpu03"})
    transport = ConcurrentEchoTransport()
    _, _, concurrent = _localise(PairCheck({"gpu01", "gpu03"}), None, None, transport, group_of(12), parallelism=4)
    assert transport.met, "the first two pair runs never overlapped"
    assert 2 <= transport.most_at_once <= 4
    assert concurrent.status == sequential.status
    assert {h: v.status for h, v in concurrent.node_verdicts.items()} == {
        h: v.status for h, v in sequential.node_verdicts.items()
    }


class ClockTransport(EchoTransport):
    """Each run takes one second of a fake clock."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def run(self, command: Command) -> CommandOutput:
        self.now += 1.0
        return super().run(command)


def test_it_stops_starting_pairs_at_its_deadline_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = ClockTransport()
    monkeypatch.setattr(pairs, "time", SimpleNamespace(monotonic=transport.monotonic))
    check = PairCheck({"gpu07"})
    budget = pair_run_budget(check, None)
    # Room for the ring (12 pairs one at a time, 1 s each) but not for the verification pairs.
    _, _, verdict = _localise(check, None, None, transport, group_of(12), deadline=budget + 11.5)
    assert len(transport.runs) == 12
    assert "cut short by the task's time budget: 1 pair run(s) left out" in verdict.reason
    assert verdict.node_verdicts["gpu07"].status == FAIL
    assert verdict.node_verdicts["gpu07"].reason.endswith("(unverified)")


def test_it_runs_no_pair_when_no_time_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = ClockTransport()
    monkeypatch.setattr(pairs, "time", SimpleNamespace(monotonic=transport.monotonic))
    _, _, verdict = _localise(PairCheck({"gpu07"}), None, None, transport, group_of(12), deadline=1.0)
    assert transport.runs == []
    assert "12 pair run(s) left out" in verdict.reason


def test_group_task_limits_stay_below_the_visibility_timeout() -> None:
    def limits(runs: int, visibility: int | None) -> tuple[int, int]:
        return group_task_limits(run_budget_s=620.0, runs_wanted=runs, connect_timeout=10, visibility=visibility)

    uncapped = limits(317, None)  # 1,250 nodes: the group run, 158 ring rounds and as many again
    assert uncapped[1] >= 25 * 3600, "the uncapped budget of 1,250 nodes would pass the visibility timeout"
    soft, hard = limits(317, 25 * 3600)
    assert soft < hard < 25 * 3600
    assert hard + 620 >= 25 * 3600, "only what does not fit is cut"
    assert limits(5, 1) == limits(1, None), "the group run itself is never cut"
    assert limits(5, None)[0] == 5 * 620 + 20 + 60  # rounds + two connects + KILN_TASK_SLACK_S


def test_a_pair_run_budget_counts_every_command_with_its_grace() -> None:
    check = PairCheck(set())
    assert pair_run_budget(check, None) == 5 + 5 + 5  # one command: its timeout, kill grace, backstop


class MaxSessionsTransport(EchoTransport):
    """A launcher whose sshd allows `limit` sessions per connection (MaxSessions)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.lock = threading.Lock()
        self.open = 0
        self.refusals = 0

    def run(self, command: Command) -> CommandOutput:
        with self.lock:
            if self.open >= self.limit:
                self.refusals += 1
                raise SessionRefusedError("launcher: the host refused another session")
            self.open += 1
        try:
            time.sleep(0.1)
            return super().run(command)
        finally:
            with self.lock:
                self.open -= 1


def test_it_runs_fewer_pairs_at_once_when_the_launcher_refuses_sessions() -> None:
    transport = MaxSessionsTransport(limit=2)
    check = PairCheck({"gpu07"})
    _, _, verdict = _localise(check, None, None, transport, group_of(12), parallelism=8)
    assert transport.refusals > 0
    assert {h for h, v in verdict.node_verdicts.items() if v.status == FAIL} == {"gpu07"}
    assert "the launcher refused more sessions; pairs ran" in verdict.reason
    assert len({tuple(r) for r in transport.runs}) == len(transport.runs), "no pair ran twice"


def test_it_gives_up_when_even_one_session_is_refused() -> None:
    with pytest.raises(SessionRefusedError):
        _localise(PairCheck({"gpu07"}), None, None, MaxSessionsTransport(limit=0), group_of(6), parallelism=4)
