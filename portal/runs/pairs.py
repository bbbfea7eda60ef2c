"""Localising a slow multi-node check by halves: the running (checks/core/localise.py decides what to run).

When a group run is not within spec, its nodes are split in halves (by rack first, then by node),
the halves run as group tests at once (disjoint node sets, `parallelism` at a time over the
launcher's one connection), the halves that are not within spec are split again, and the last
suspects are paired with nodes that passed: one slow node among N is named in O(log N) rounds.
Every sub-run's outputs and measurements are kept, its measurements labelled with its round and
nodes (and `pair` for a pair), plus one `localise_status` measurement per sub-run. No database
access here: the group execution (portal/execution/groups.py) records what this returns.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.conf import settings

from checks.core import localise as bisect
from checks.core.base import (
    Command,
    CommandOutput,
    GroupCheck,
    GroupContext,
    GroupVerdict,
    Measurement,
    Verdict,
    get_group_check,
    run_group_check,
)
from worker.timeouts import group_task_limits
from worker.transport import CHANNEL_SLACK_S, REMOTE_KILL_GRACE_S, SessionRefusedError, Transport

SubOutcome = tuple[list[CommandOutput], list[Measurement], Verdict]


def run_commands(transport: Transport, commands: list[Command]) -> list[CommandOutput]:
    """The commands in order over one transport, stopping after one that timed out."""
    outputs = []
    for command in commands:
        output = transport.run(command)
        outputs.append(output)
        if output.timed_out:
            break  # the rest would only wait on the same hung device
    return outputs


def subrun_budget(check: GroupCheck, params: Any, node_count: int = 2) -> float:
    """Seconds one sub-run may take: its commands' budgets with their kill grace and backstop (a
    launcher's commands take as long whatever the nodes; a fan-out's start waits on their number)."""
    commands = check.stand_in_commands(params, node_count)
    return sum(c.timeout + REMOTE_KILL_GRACE_S + CHANNEL_SLACK_S for c in commands)


def group_item_limits(*, item: dict[str, Any], node_count: int) -> tuple[int, int]:
    """(soft, hard) Celery limits of a group check's task over `node_count` nodes: the group run and
    the rounds of localisation by halves (checks/core/localise.py budget_rounds), capped below the
    broker's visibility timeout. The dispatcher enqueues with these and the reaper judges by them."""
    check = get_group_check(item["kind"])
    rounds = (
        bisect.budget_rounds(node_count, capacity=settings.KILN_PAIR_PARALLELISM)
        if check.pairwise and node_count >= 3
        else 0
    )
    return group_task_limits(
        run_budget_s=subrun_budget(check, check.make_params(item["params"]), node_count),
        runs_wanted=1 + rounds,
        connect_timeout=settings.KILN_SSH_CONNECT_TIMEOUT,
        visibility=getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}).get("visibility_timeout"),
    )


class _Runner:
    """Runs the sub-runs of one localisation and keeps their outputs and measurements."""

    def __init__(
        self,
        check: GroupCheck,
        params: Any,
        thresholds: Any,
        transport: Transport,
        group: GroupContext,
        *,
        parallelism: int,
    ) -> None:
        self.check, self.params, self.thresholds = check, params, thresholds
        self.transport, self.group = transport, group
        self.by_name = {n.hostname: n for n in group.nodes}
        self.outputs: list[CommandOutput] = []
        self.measurements: list[Measurement] = []
        self.at_once = max(1, parallelism)
        self.refused_note = ""

    def run_one(self, run: bisect.SubRun, round_no: int, index: int) -> SubOutcome:
        nodes = tuple(self.by_name[h] for h in run.nodes)
        sub = GroupContext(nodes=nodes, launcher=self.group.launcher, tag=f"{self.group.tag}-r{round_no}-{index}")
        outputs = run_commands(self.transport, self.check.group_commands(self.params, sub))
        measurements, verdict = run_group_check(self.check, self.params, self.thresholds, outputs, sub)
        labels = {"round": str(round_no), "nodes": str(NodeSet.fromlist(list(run.nodes)))}
        if run.is_pair:
            labels["pair"] = ",".join(run.nodes)
        for m in measurements:
            m.labels = {**(m.labels or {}), **labels}
        status = Measurement(
            name="localise_status", text=verdict.status, labels={**labels, "reason": verdict.reason[:200]}
        )
        return outputs, [*measurements, status], verdict

    def run_round(self, round_no: int, runs: Sequence[bisect.SubRun]) -> list[tuple[bisect.SubRun, Verdict]]:
        """Runs one round at once and keeps what it produced; returns the sub-runs that ran with
        their verdicts (those the launcher refused a session are left out, to be planned again)."""
        if len(runs) == 1:
            done: list[Any] = [self.run_one(runs[0], round_no, 0)]
        else:
            with ThreadPoolExecutor(max_workers=len(runs), thread_name_prefix="kiln-localise") as pool:
                futures = [pool.submit(self.run_one, run, round_no, i) for i, run in enumerate(runs)]
            done = [f.exception() or f.result() for f in futures]
        ran: list[tuple[bisect.SubRun, Verdict]] = []
        refused = 0
        for run, outcome in zip(runs, done, strict=True):
            if isinstance(outcome, SessionRefusedError) and self.at_once > 1:
                refused += 1
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            outputs, measurements, verdict = outcome
            self.outputs.extend(outputs)
            self.measurements.extend(measurements)
            ran.append((run, verdict))
        if refused:
            # The launcher's sshd allows fewer sessions per connection (MaxSessions): fewer at once.
            self.at_once = max(1, min(self.at_once, len(runs)) // 2)
            self.refused_note = f"the launcher refused more sessions; sub-runs ran {self.at_once} at a time"
        return ran


def localise(
    check: GroupCheck,
    params: Any,
    thresholds: Any,
    transport: Transport,
    group: GroupContext,
    *,
    root: Verdict,
    parallelism: int = 1,
    deadline: float | None = None,
) -> tuple[list[CommandOutput], list[Measurement], GroupVerdict]:
    """Name the node(s) that keep `group` (whose run together gave `root`) out of spec, by halves
    (checks/core/localise.py). Disjoint sub-runs run `parallelism` at a time over the launcher's
    connection. A round that could not finish before `deadline` (monotonic) is not started; the
    verdict then says which nodes were not localised, so a cut-short search is never mistaken for
    a complete one."""
    runner = _Runner(check, params, thresholds, transport, group, parallelism=parallelism)
    state = bisect.start(group.hostnames, root, {n.hostname: n.rack for n in group.nodes})
    budget = subrun_budget(check, params)
    cut_short = False
    # A backstop against a planner that would never stop: no search takes more rounds than this.
    most_rounds = 4 * len(group.nodes) + 8
    while state.rounds < most_rounds:
        runs = bisect.plan(state, capacity=runner.at_once)
        if not runs:
            break
        if deadline is not None and time.monotonic() + budget > deadline:
            cut_short = True
            break
        bisect.record(state, runner.run_round(state.rounds + 1, runs))
    localised = bisect.conclude(state, cut_short=cut_short)
    if runner.refused_note:
        note = runner.refused_note
        reason = f"{localised.reason} ({note})" if localised.reason else note
        localised = GroupVerdict(status=localised.status, reason=reason, node_verdicts=localised.node_verdicts)
    return runner.outputs, runner.measurements, localised
