"""Localisation by halves, as the portal runs it (portal/runs/pairs.py): halves of the group at once,
then pairs with cleared nodes, over one launcher connection; labelled evidence per sub-run, the time
budget and the launcher's session limit (the planner itself: tests/checks/test_localise.py)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    Command,
    CommandOutput,
    GroupCheck,
    GroupContext,
    GroupVerdict,
    Measurement,
    NodeContext,
    Verdict,
    get_group_check,
)
from checks.core.localise import budget_rounds
from portal.runs import pairs
from portal.runs.pairs import localise as _localise
from portal.runs.pairs import subrun_budget
from worker.ssh import SessionRefusedError
from worker.timeouts import group_task_limits

SLOW_GROUP = Verdict(FAIL, "the whole group is slow")


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


def group_of(n: int, racks: int = 0) -> GroupContext:
    nodes = tuple(
        NodeContext(hostname=f"gpu{i:02d}", rack=f"rack{(i - 1) * racks // n + 1}" if racks else "")
        for i in range(1, n + 1)
    )
    return GroupContext(nodes=nodes, launcher=nodes[0], tag="t")


def run_localise(
    check: PairCheck, transport: EchoTransport, group: GroupContext, **kwargs: Any
) -> tuple[list[CommandOutput], list[Measurement], GroupVerdict]:
    return _localise(check, None, None, transport, group, root=SLOW_GROUP, **kwargs)


def localise(bad: set[str], n: int = 12, parallelism: int = 8) -> tuple[GroupVerdict, EchoTransport]:
    transport = EchoTransport()
    _, _, verdict = run_localise(PairCheck(bad), transport, group_of(n), parallelism=parallelism)
    return verdict, transport


def failed(verdict: GroupVerdict) -> set[str]:
    return {h for h, v in verdict.node_verdicts.items() if v.status == FAIL}


def test_it_names_the_one_node_with_a_slow_link() -> None:
    verdict, transport = localise({"gpu07"})
    assert verdict.status == FAIL
    assert failed(verdict) == {"gpu07"}
    assert "gpu07" in verdict.reason
    assert verdict.node_verdicts["gpu01"].status == PASS
    assert set(verdict.node_verdicts) == {f"gpu{i:02d}" for i in range(1, 13)}
    assert transport.runs[:2] == [tuple(f"gpu{i:02d}" for i in range(1, 7)), tuple(f"gpu{i:02d}" for i in range(7, 13))]
    assert len(transport.runs) < 12, "fewer runs than a ring of pairs"


def test_it_clears_a_node_sitting_between_two_bad_nodes() -> None:
    verdict, _ = localise({"gpu01", "gpu03"})
    assert failed(verdict) == {"gpu01", "gpu03"}
    assert verdict.node_verdicts["gpu02"].status == PASS


def test_it_blames_no_single_node_when_every_sub_run_is_slow() -> None:
    verdict, _ = localise({f"gpu{i:02d}" for i in range(1, 5)}, n=4)
    assert verdict.status == FAIL
    assert verdict.node_verdicts == {}
    assert "no single node" in verdict.reason


def test_it_labels_every_sub_run_with_its_round_and_nodes() -> None:
    outputs, measurements, verdict = run_localise(
        PairCheck({"gpu23"}), EchoTransport(), group_of(32, racks=4), parallelism=8
    )
    statuses = [m for m in measurements if m.name == "localise_status"]
    assert len(statuses) == len(outputs), "one status per sub-run (one command each)"
    rounds: dict[str, list[str]] = {}
    for m in statuses:
        rounds.setdefault(m.labels["round"], []).append(m.labels["nodes"])
    assert rounds["1"] == ["gpu[01-16]", "gpu[17-32]"], "whole racks: rack1+rack2 | rack3+rack4"
    assert rounds["2"] == ["gpu[17-24]", "gpu[25-32]"]
    assert len(rounds) == 3 and len(rounds["3"]) == 8
    pair = next(m for m in statuses if "gpu23" in m.labels.get("pair", "").split(","))
    assert (pair.text, pair.labels["round"]) == (FAIL, "3")
    hosts = [m for m in measurements if m.name == "hosts"]
    assert all({"round", "nodes"} <= set(m.labels) for m in hosts)
    assert failed(verdict) == {"gpu23"}
    assert "by halves (12 sub-run(s) in 3 round(s))" in verdict.reason


def test_it_uses_a_tag_per_sub_run() -> None:
    seen: list[str] = []

    class TagCheck(PairCheck):
        def group_commands(self, params: Any, group: GroupContext) -> list[Command]:
            seen.append(group.tag)
            return super().group_commands(params, group)

    run_localise(TagCheck({"gpu05"}), EchoTransport(), group_of(8), parallelism=8)
    seen = [tag for tag in seen if tag != "budget"]  # subrun_budget's stand-in commands
    assert len(seen) == len(set(seen))
    assert seen[:2] == ["t-r1-0", "t-r1-1"]


class BrokenNodeCheck(PairCheck):
    """A node the launcher cannot start ranks on: every run with it is an error, not a verdict."""

    def evaluate_group(self, measurements: list[Measurement], thresholds: Any, group: GroupContext) -> GroupVerdict:
        if "gpu05" in group.hostnames:
            return GroupVerdict(status=ERROR, reason="ORTE was unable to reliably start one or more daemons")
        return super().evaluate_group(measurements, thresholds, group)


def test_an_unreachable_node_is_an_error_never_a_pass() -> None:
    _, _, verdict = run_localise(BrokenNodeCheck(set()), EchoTransport(), group_of(12))
    assert verdict.node_verdicts["gpu05"].status == ERROR
    assert {h for h, v in verdict.node_verdicts.items() if v.status != PASS} == {"gpu05"}
    assert verdict.status == ERROR


class ConcurrentEchoTransport(EchoTransport):
    """Records how many sub-runs overlap, and fails if one node is in two of them at once.

    The first two runs wait for each other at a barrier: run concurrently they meet; run one after
    the other the first waits alone, the barrier breaks and `met` says so. No sleep, no time bound."""

    # Only a guard against a hang when the runs are sequential; meeting takes microseconds.
    MEET_TIMEOUT_S = 30

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.busy: set[str] = set()
        self.most_at_once = 0
        self.running = 0
        self.started = 0
        self.meet = threading.Barrier(2, timeout=self.MEET_TIMEOUT_S)
        self.met = False

    def run(self, command: Command) -> CommandOutput:
        hosts = set(command.argv[1:])
        with self.lock:
            assert not hosts & self.busy, f"{hosts & self.busy} in two concurrent sub-runs"
            self.busy |= hosts
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
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
            self.running -= 1
        return super().run(command)


def test_it_runs_disjoint_pairs_at_once_with_the_same_verdict() -> None:
    sequential, _ = localise({"gpu01", "gpu03"}, parallelism=1)
    transport = ConcurrentEchoTransport()
    _, _, concurrent = run_localise(PairCheck({"gpu01", "gpu03"}), transport, group_of(12), parallelism=4)
    assert transport.met, "the first two sub-runs never overlapped"
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


def test_it_stops_starting_rounds_at_its_deadline_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = ClockTransport()
    monkeypatch.setattr(pairs, "time", SimpleNamespace(monotonic=transport.monotonic))
    check = PairCheck({"gpu23"})
    budget = subrun_budget(check, None)
    # Two sub-runs at a time, 1 s each on the fake clock: room for two rounds, not a third.
    _, _, verdict = run_localise(check, transport, group_of(32), parallelism=2, deadline=budget + 2.5)
    assert [len(r) for r in transport.runs] == [16, 16, 8, 8]
    assert (
        "not localised: gpu[17-24] (8 node(s)): localisation cut short by the task's time budget after 2 round(s)"
        in (verdict.reason)
    )
    assert verdict.status == FAIL
    assert failed(verdict) == set(), "nobody is named without a pair with a known-good partner"
    for node in (f"gpu{i}" for i in range(17, 25)):
        assert verdict.node_verdicts[node].status == ERROR, "a suspect left is never passed"
        assert verdict.node_verdicts[node].reason.startswith("not localised: localisation cut short")
    assert verdict.node_verdicts["gpu25"].status == PASS
    assert verdict.node_verdicts["gpu01"].status == PASS


def test_it_runs_no_sub_run_when_no_time_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = ClockTransport()
    monkeypatch.setattr(pairs, "time", SimpleNamespace(monotonic=transport.monotonic))
    outputs, _, verdict = run_localise(PairCheck({"gpu07"}), transport, group_of(12), deadline=1.0)
    assert transport.runs == [] and outputs == []
    assert verdict.status == ERROR
    assert "cut short by the task's time budget before its first sub-run" in verdict.reason


def test_group_task_limits_stay_below_the_visibility_timeout() -> None:
    def limits(runs: int, visibility: int | None) -> tuple[int, int]:
        return group_task_limits(run_budget_s=620.0, runs_wanted=runs, connect_timeout=10, visibility=visibility)

    uncapped = limits(317, None)  # what a ring of pairs wanted at 1,250 nodes: 158 rounds and as many again
    assert uncapped[1] >= 25 * 3600, "that budget would pass the visibility timeout"
    soft, hard = limits(317, 25 * 3600)
    assert soft < hard < 25 * 3600
    assert hard + 620 >= 25 * 3600, "only what does not fit is cut"
    assert limits(5, 1) == limits(1, None), "the group run itself is never cut"
    assert limits(5, None)[0] == 5 * 620 + 20 + 60  # rounds + two connects + KILN_TASK_SLACK_S


def test_a_sub_run_budget_counts_every_command_with_its_grace() -> None:
    check = PairCheck(set())
    assert subrun_budget(check, None) == 5 + 5 + 5  # one command: its timeout, kill grace, backstop


def test_the_group_task_budgets_the_rounds_of_halves(settings: Any) -> None:
    from portal.runs.pairs import group_item_limits

    settings.KILN_PAIR_PARALLELISM = 8
    item = {"kind": "nccl_allreduce_multi", "params": {}}
    check = get_group_check("nccl_allreduce_multi")
    budget = subrun_budget(check, check.make_params({}))
    for n in (3, 64, 1250):  # the group run, then the rounds of halves the planner budgets for
        soft, _ = group_item_limits(item=item, node_count=n)
        assert soft == int(
            budget * (1 + budget_rounds(n, capacity=8))
            + 2 * settings.KILN_SSH_CONNECT_TIMEOUT
            + settings.KILN_TASK_SLACK_S
        )
    assert budget_rounds(1250, capacity=8) < 20, "not the 317 runs of a ring of pairs"
    assert group_item_limits(item=item, node_count=2) == group_item_limits(item=item, node_count=1), "no search"


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


def test_it_runs_fewer_sub_runs_at_once_when_the_launcher_refuses_sessions() -> None:
    transport = MaxSessionsTransport(limit=2)
    check = PairCheck({"gpu07"})
    _, _, verdict = run_localise(check, transport, group_of(12), parallelism=8)
    assert transport.refusals > 0
    assert failed(verdict) == {"gpu07"}
    assert "the launcher refused more sessions; sub-runs ran" in verdict.reason
    assert len({tuple(r) for r in transport.runs}) == len(transport.runs), "no sub-run ran twice"


def test_it_gives_up_when_even_one_session_is_refused() -> None:
    with pytest.raises(SessionRefusedError):
        run_localise(PairCheck({"gpu07"}), MaxSessionsTransport(limit=0), group_of(6), parallelism=4)
