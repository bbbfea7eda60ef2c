"""Pairwise localisation of a multi-node check: which node slows the group.

Ring pairs first (each node in two pairs), then every suspect paired once more with a node already
cleared by a good pair, all over the launcher's one connection. No database access here: the
group execution (portal/runs/groups.py) records what this returns.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.conf import settings

from checks.base import (
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
    run_group_check,
)
from worker.ssh import CHANNEL_SLACK_S, REMOTE_KILL_GRACE_S, SessionRefusedError, Transport
from worker.timeouts import group_task_limits

T = TypeVar("T")
Pair = tuple[str, str]
PairOutcome = tuple[list[CommandOutput], list[Measurement], Verdict]


def run_commands(transport: Transport, commands: list[Command]) -> list[CommandOutput]:
    """The commands in order over one transport, stopping after one that timed out."""
    outputs = []
    for command in commands:
        output = transport.run(command)
        outputs.append(output)
        if output.timed_out:
            break  # the rest would only wait on the same hung device
    return outputs


def ring_pairs(nodes: Sequence[T]) -> list[tuple[T, T]]:
    """Each node with its successor (wrapping): every node is in exactly two pairs, n runs in all."""
    if len(nodes) == 3:
        return [(nodes[0], nodes[1]), (nodes[1], nodes[2]), (nodes[0], nodes[2])]
    return [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))]


def pair_batches(pairs: Sequence[tuple[T, T]], parallelism: int) -> list[list[tuple[T, T]]]:
    """The pairs in batches that run at once: disjoint (a node in two concurrent pairs would split
    its bandwidth between them), at most `parallelism` each, in the given order otherwise."""
    batches: list[list[tuple[T, T]]] = []
    pending = list(pairs)
    while pending:
        batch: list[tuple[T, T]] = []
        busy: set[T] = set()
        later: list[tuple[T, T]] = []
        for a, b in pending:
            if len(batch) < max(1, parallelism) and a not in busy and b not in busy:
                batch.append((a, b))
                busy.update((a, b))
            else:
                later.append((a, b))
        batches.append(batch)
        pending = later
    return batches


def pair_run_budget(check: GroupCheck, params: Any) -> float:
    """Seconds one pair run may take: its commands' budgets with their kill grace and backstop."""
    return sum(c.timeout + REMOTE_KILL_GRACE_S + CHANNEL_SLACK_S for c in check.stand_in_commands(params))


def group_item_limits(*, item: dict[str, Any], node_count: int) -> tuple[int, int]:
    """(soft, hard) Celery limits of a group check's task over `node_count` nodes: the group run,
    the ring of pairs in rounds and as many verification rounds, capped below the broker's
    visibility timeout. The dispatcher enqueues with these and the reaper judges by them."""
    check = get_group_check(item["kind"])
    ring_rounds = (
        len(pair_batches(ring_pairs(range(node_count)), settings.KILN_PAIR_PARALLELISM))
        if check.pairwise and node_count >= 3
        else 0
    )
    return group_task_limits(
        run_budget_s=pair_run_budget(check, check.make_params(item["params"])),
        runs_wanted=1 + 2 * ring_rounds,
        connect_timeout=settings.KILN_SSH_CONNECT_TIMEOUT,
        visibility=getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}).get("visibility_timeout"),
    )


class _Localiser:
    """One localisation: the pairs run so far, their outputs, and how many were left out."""

    def __init__(
        self,
        check: GroupCheck,
        params: Any,
        thresholds: Any,
        transport: Transport,
        group: GroupContext,
        *,
        parallelism: int,
        deadline: float | None,
    ) -> None:
        self.check, self.params, self.thresholds = check, params, thresholds
        self.transport, self.group, self.deadline = transport, group, deadline
        self.outputs: list[CommandOutput] = []
        self.measurements: list[Measurement] = []
        self.pair_verdicts: dict[Pair, Verdict] = {}
        self.by_name = {n.hostname: n for n in group.nodes}
        self.budget = pair_run_budget(check, params)
        self.not_run = 0
        self.tags = itertools.count()
        self.at_once = max(1, parallelism)
        self.refused_note = ""

    def run_pair(self, index: int, a: NodeContext, b: NodeContext) -> PairOutcome:
        pair = GroupContext(nodes=(a, b), launcher=self.group.launcher, tag=f"{self.group.tag}-pair{index}")
        pair_outputs = run_commands(self.transport, self.check.group_commands(self.params, pair))
        pair_measurements, pair_verdict = run_group_check(self.check, self.params, self.thresholds, pair_outputs, pair)
        label = f"{a.hostname},{b.hostname}"
        for m in pair_measurements:
            m.labels = {**(m.labels or {}), "pair": label}
        pair_measurements.append(
            Measurement(
                name="pair_status",
                text=pair_verdict.status,
                labels={"pair": label, "reason": pair_verdict.reason[:200]},
            )
        )
        return pair_outputs, pair_measurements, pair_verdict

    def run_batch(self, batch: list[Pair]) -> list[Pair]:
        """Runs one batch and records its pairs; returns the pairs the launcher refused a session."""
        jobs = [(next(self.tags), self.by_name[a], self.by_name[b]) for a, b in batch]
        if len(jobs) == 1:
            done: list[Any] = [self.run_pair(*jobs[0])]
        else:
            with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="kiln-pair") as pool:
                futures = [pool.submit(self.run_pair, *job) for job in jobs]
            done = [f.exception() or f.result() for f in futures]
        refused: list[Pair] = []
        for (_, a, b), outcome in zip(jobs, done, strict=True):
            if isinstance(outcome, SessionRefusedError) and self.at_once > 1:
                refused.append((a.hostname, b.hostname))
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            pair_outputs, pair_measurements, pair_verdict = outcome
            self.outputs.extend(pair_outputs)
            self.measurements.extend(pair_measurements)
            self.pair_verdicts[(a.hostname, b.hostname)] = pair_verdict
        if refused:
            # The launcher's sshd allows fewer sessions per connection (MaxSessions): fewer at once.
            self.at_once = max(1, min(self.at_once, len(batch)) // 2)
            self.refused_note = f"the launcher refused more sessions; pairs ran {self.at_once} at a time"
        return refused

    def run_pairs(self, pairs: list[Pair]) -> None:
        pending = list(pairs)
        while pending:
            if self.deadline is not None and time.monotonic() + self.budget > self.deadline:
                self.not_run += len(pending)
                return
            batch = pair_batches(pending, self.at_once)[0]
            refused = self.run_batch(batch)
            pending = refused + [pair for pair in pending if pair not in batch]

    def verification_pairs(self) -> list[Pair]:
        """Each suspect with a node cleared by a good pair that it has not been paired with yet."""
        cleared = sorted({n for pair, v in self.pair_verdicts.items() if v.status == PASS for n in pair})
        if not cleared:
            return []
        verification: list[Pair] = []
        for index, suspect in enumerate(sorted(self.check.localise(self.pair_verdicts).node_verdicts)):
            partners = [c for c in cleared if c != suspect and (suspect, c) not in self.pair_verdicts]
            partners = [c for c in partners if (c, suspect) not in self.pair_verdicts]
            if partners:
                verification.append((suspect, partners[index % len(partners)]))
        return verification

    def clear_good_partners(self, localised: GroupVerdict) -> None:
        """Clear the others by name: a node with a good pair is not the one slowing the group."""
        if not localised.node_verdicts:
            return
        suspects = set(localised.node_verdicts)
        for (a, b), verdict in self.pair_verdicts.items():
            if verdict.status != PASS:
                continue
            for node, peer in ((a, b), (b, a)):
                if node not in suspects and node not in localised.node_verdicts:
                    localised.node_verdicts[node] = Verdict(status=PASS, reason=f"pair with {peer} within spec")

    def cut_short(self, localised: GroupVerdict, *, ring_complete: bool) -> GroupVerdict:
        """A localisation the time budget cut short says so, and its suspects are unverified."""
        cut = f"localisation cut short by the task's time budget: {self.not_run} pair run(s) left out"
        if not ring_complete:
            cut += ", and no verification pairs"
        for node, verdict in localised.node_verdicts.items():
            if verdict.status != PASS:
                localised.node_verdicts[node] = Verdict(status=verdict.status, reason=f"{verdict.reason} (unverified)")
        return _noted(localised, f"{localised.reason}; {cut}" if localised.reason else cut)


def _noted(verdict: GroupVerdict, reason: str) -> GroupVerdict:
    return GroupVerdict(status=verdict.status, reason=reason, node_verdicts=verdict.node_verdicts)


def localise(
    check: GroupCheck,
    params: Any,
    thresholds: Any,
    transport: Transport,
    group: GroupContext,
    *,
    parallelism: int = 1,
    deadline: float | None = None,
) -> tuple[list[CommandOutput], list[Measurement], GroupVerdict]:
    """Ring pairs first (each node in two pairs); then every suspect is paired once more with a node
    already cleared by a good pair. A node sitting between two bad nodes has only bad ring pairs;
    the extra pair clears it, so only nodes bad with a known-good partner are named.

    Disjoint pairs run `parallelism` at a time over the launcher's connection. A batch that could
    not finish before `deadline` (monotonic) is not started; the verdict says how many pairs were
    left out, so a cut-short localisation is never mistaken for a complete one."""
    run = _Localiser(check, params, thresholds, transport, group, parallelism=parallelism, deadline=deadline)
    run.run_pairs(ring_pairs([n.hostname for n in group.nodes]))
    ring_complete = not run.not_run
    if ring_complete:
        run.run_pairs(run.verification_pairs())
    localised = check.localise(run.pair_verdicts)
    run.clear_good_partners(localised)
    if run.refused_note:
        note = run.refused_note
        localised = _noted(localised, f"{localised.reason} ({note})" if localised.reason else note)
    if run.not_run:
        localised = run.cut_short(localised, ring_complete=ring_complete)
    return run.outputs, run.measurements, localised
