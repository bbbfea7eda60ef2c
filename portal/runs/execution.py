"""Running one node's share of a run: one connection, the plan items in order, results recorded.

This is the service the node task calls. It touches the network only through `worker.ssh`.

A worker runs many node tasks at once on threads, so a task holds no database connection while it
waits on its node: its database work is done in short phases (worker.db.db_phase: claim, record
one result, close the run), each closing the thread's connection when it ends. One SSH connection
serves every command of the node's checks, and identical read-only reads (the probe) run once
(worker.shared_reads).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ClusterShell.NodeSet import NodeSet
from django.conf import settings

from checks.base import (
    ERROR,
    PASS,
    Check,
    Command,
    CommandOutput,
    GroupCheck,
    GroupContext,
    GroupVerdict,
    Measurement,
    NodeContext,
    Series,
    Verdict,
    get_check,
    run_check,
    run_group_check,
    worst_status,
)
from portal.inventory.models import Node
from portal.runs import leases, services
from portal.runs.dbretry import portal_fault_reason
from portal.runs.models import CheckResult, Run, Status
from worker.db import db_phase, ledger, timed
from worker.shared_reads import SharedReads
from worker.ssh import (
    CHANNEL_SLACK_S,
    REMOTE_KILL_GRACE_S,
    NodeTarget,
    SessionRefusedError,
    Transport,
    TransportError,
    open_transport,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")


def node_target(node: Node) -> NodeTarget:
    cluster = node.cluster
    return NodeTarget(
        hostname=node.hostname,
        transport=cluster.transport,
        address=node.address,
        port=node.ssh_port or cluster.ssh_port,
        user=cluster.ssh_user,
        key_path=cluster.ssh_key_path,
        known_hosts=cluster.known_hosts,
        pinned_fingerprint=node.host_key_fingerprint,
        jump=cluster.jump_host,
        connect_timeout=settings.KILN_SSH_CONNECT_TIMEOUT,
        local_env=dict(node.local_env or {}),
    )


def snapshot_item(run: Run, item_key: str) -> dict[str, Any]:
    for item in run.plan_snapshot["items"]:
        if item["key"] == item_key:
            return item
    raise KeyError(f"run {run.pk}: no item {item_key!r} in its plan snapshot")


def execute_node(*, run_id: int, node_id: int, claim: str) -> int:
    """Run every unfinished check of one node in this run. Returns how many results it recorded.

    The claimed results are held under a lease (portal/runs/leases.py) while they run: renewed by
    the process's heartbeat, and stopped on the node when they are closed under the task. The
    database is used in short phases (worker/db.py): no connection is held while the node works."""
    with db_phase("claim"):
        results = services.results_claim(run_id=run_id, node_id=node_id, claim=claim)
    if not results:
        return 0
    with leases.held(claim=claim, results=results, label=f"node #{node_id}") as holding:
        return _execute_held(run_id=run_id, node_id=node_id, claim=claim, results=results, holding=holding)


def _execute_held(*, run_id: int, node_id: int, claim: str, results: list[CheckResult], holding: leases.Holding) -> int:
    with db_phase("claim"):
        services.run_mark_started(run_id=run_id)
        run = Run.objects.select_related("cluster").get(pk=run_id)
        node = Node.objects.select_related("cluster").get(pk=node_id)
    holding.label = node.hostname
    target = node_target(node)
    try:
        with timed("connect"):
            # Shared reads outside the lease's tracking: an identical read answered from an earlier
            # one runs nothing on the node, so there is no process group to record for it.
            transport = SharedReads(holding.track(open_transport(target)))
    except TransportError as exc:
        reason = f"{exc.kind}: {exc.message}"
        logger.warning("run %s node %s: %s", run_id, node.hostname, reason)
        with db_phase("record"):
            return services.results_fail_remaining(
                run_id=run_id, node_id=node_id, claim=claim, status=Status.ERROR, reason=reason
            )
    recorded = 0
    try:
        leases.stop_taken_over(transport=transport.inner, results=results, label=node.hostname)
        for result in results:
            if holding.is_stopped(result.pk):
                continue  # cancelled (or reaped) before it started
            holding.begin(result)
            try:
                if _run_one(run=run, node=node, result=result, transport=transport, claim=claim):
                    recorded += 1
            except leases.CheckStopped:
                continue  # closed under the task while it ran: its process group was stopped
    except TransportError as exc:
        with db_phase("record"):
            recorded += services.results_fail_remaining(
                run_id=run_id, node_id=node_id, claim=claim, status=Status.ERROR, reason=f"{exc.kind}: {exc.message}"
            )
    except Exception as exc:
        # A bug, or the database gone for longer than the retries, must not leave results `running`
        # forever: record it as the portal's fault (node health ignores it), then let Celery log it.
        logger.exception("run %s node %s: internal error", run_id, node.hostname)
        with db_phase("record"):
            services.results_fail_remaining(
                run_id=run_id,
                node_id=node_id,
                claim=claim,
                status=Status.ERROR,
                reason=portal_fault_reason(exc),
                portal_fault=True,
            )
        raise
    finally:
        transport.close()
        _note_reads(node, transport)
    return recorded


def _note_reads(node: Node, transport: SharedReads) -> None:
    book = ledger()
    if book is not None:
        book.notes.update(node=node.hostname, commands_run=transport.ran, commands_shared=transport.shared)


def _run_one(*, run: Run, node: Node, result: CheckResult, transport: Transport, claim: str) -> bool:
    item = snapshot_item(run, result.item_key)
    check = get_check(item["kind"])
    params = check.make_params(item["params"])
    # A node's own expected_gpus reaches the checks through NodeContext (gpu_inventory prefers it).
    thresholds = check.make_thresholds(dict(item["thresholds"]))
    context = node_context(run, node)
    with timed("commands"):
        outputs = _run_commands(transport, check.commands(params, context))
    with timed("judge"):
        measurements, verdict = run_check(check, params, thresholds, outputs, context)
        if not outputs:
            verdict = Verdict(status=ERROR, reason="the check produced no command to run")
        series = _series(check, outputs, verdict)
    with db_phase("record"):
        return services.record_from_check(
            result=result, claim=claim, verdict=verdict, measurements=measurements, outputs=outputs, series=series
        )


def node_context(run: Run, node: Node) -> NodeContext:
    started = run.started_at or run.created_at
    return NodeContext(
        hostname=node.hostname,
        expected_gpus=node.expected_gpus,
        address=node.address,
        since=started.timestamp() if started else None,
        settings=dict(node.cluster.check_settings or {}),
    )


def _run_commands(transport: Transport, commands: list[Command]) -> list[CommandOutput]:
    outputs = []
    for command in commands:
        output = transport.run(command)
        outputs.append(output)
        if output.timed_out:
            break  # the rest would only wait on the same hung device
    return outputs


def _series(check: Check, outputs: list[CommandOutput], verdict: Verdict) -> list[Series]:
    if verdict.status == ERROR and not outputs:
        return []
    try:
        return check.series(outputs)
    except Exception:  # a series is an illustration; its failure must not change the verdict
        logger.exception("series of %s failed", check.key)
        return []


def execute_group(*, run_id: int, result_id: int, claim: str, time_budget_s: float | None = None) -> bool:
    """Run one multi-node check from its launcher over the run's reachable nodes.

    Nodes whose per-node checks ended in `error` (unreachable, hung) are left out, so one dead
    node does not fail the collective for everyone; they are named in the reason. When the
    check supports it and the group is not healthy, node pairs are run to localise the culprit,
    within `time_budget_s` from now (the task's soft limit less its slack; None: no limit).
    """
    deadline = None if time_budget_s is None else time.monotonic() + time_budget_s
    with db_phase("claim"):
        result = services.group_result_claim(result_id=result_id, claim=claim)
    if result is None:
        return False
    with leases.held(claim=claim, results=[result], label=f"result #{result_id}") as holding:
        try:
            return _execute_group_held(run_id=run_id, result=result, claim=claim, deadline=deadline, holding=holding)
        except leases.CheckStopped:
            return False  # cancelled (or reaped) while it ran: its process groups were stopped


def _execute_group_held(
    *, run_id: int, result: CheckResult, claim: str, deadline: float | None, holding: leases.Holding
) -> bool:
    with db_phase("claim"):
        run = Run.objects.select_related("cluster").get(pk=run_id)
        item = snapshot_item(run, result.item_key)
        check = get_check(item["kind"])
        params = check.make_params(item["params"])
        thresholds = check.make_thresholds(item["thresholds"])
        members, excluded = group_members(run)
        if len(members) < check.min_nodes:
            why = f"needs at least {check.min_nodes} reachable nodes, has {len(members)}"
            if excluded:
                why += f" ({NodeSet.fromlist(excluded)} left out after per-node errors)"
            status = Status.SKIPPED if not excluded else Status.ERROR
            return services.record_from_check(
                result=result, claim=claim, verdict=Verdict(status=status, reason=why), measurements=[], outputs=[]
            )
    launcher = members[0]
    holding.label = f"launcher {launcher.hostname}"
    contexts = tuple(node_context(run, n) for n in members)
    group = GroupContext(nodes=contexts, launcher=contexts[0], tag=f"kiln-{run.pk}-{result.pk}")
    try:
        transport = holding.track(open_transport(node_target(launcher)))
    except TransportError as exc:
        verdict = Verdict(status=ERROR, reason=f"launcher {launcher.hostname}: {exc.kind}: {exc.message}")
        with db_phase("record"):
            return services.record_from_check(result=result, claim=claim, verdict=verdict, measurements=[], outputs=[])
    try:
        leases.stop_taken_over(transport=transport.inner, results=[result], label=launcher.hostname)
        holding.begin(result)
        outputs = _run_commands(transport, check.group_commands(params, group))
        measurements, verdict = run_group_check(check, params, thresholds, outputs, group)
        attribution = dict(getattr(verdict, "node_verdicts", {}) or {})
        if check.pairwise and len(members) >= 3 and (verdict.status != PASS or item["params"].get("pairwise_always")):
            try:
                pair_outputs, pair_measurements, localised = _localise(
                    check,
                    params,
                    thresholds,
                    transport,
                    group,
                    parallelism=settings.KILN_PAIR_PARALLELISM,
                    deadline=deadline,
                )
            except TransportError as exc:
                # The group run stands; only the localisation could not be done.
                why = f"pairwise localisation not done: launcher {launcher.hostname}: {exc.kind}: {exc.message}"
                verdict = Verdict(status=verdict.status, reason=f"{verdict.reason}; {why}" if verdict.reason else why)
            else:
                outputs += pair_outputs
                measurements += pair_measurements
                attribution.update(localised.node_verdicts)
                merged = [verdict.status, localised.status] if pair_outputs else [verdict.status]
                verdict = Verdict(status=worst_status(merged), reason=_join(verdict, localised))
    except TransportError as exc:
        verdict = Verdict(status=ERROR, reason=f"launcher {launcher.hostname}: {exc.kind}: {exc.message}")
        with db_phase("record"):
            return services.record_from_check(result=result, claim=claim, verdict=verdict, measurements=[], outputs=[])
    finally:
        transport.close()
    if attribution:
        # The output named the nodes at fault; the other members were measured and are fine.
        named = ", ".join(sorted(h for h, v in attribution.items() if v.status != PASS)) or "no node"
        for node in members:
            attribution.setdefault(node.hostname, Verdict(status=PASS, reason=f"within spec (attributed: {named})"))
    if excluded:
        verdict.reason += f" (left out after per-node errors: {NodeSet.fromlist(excluded)})"
        for hostname in excluded:
            attribution[hostname] = Verdict(status=Status.SKIPPED, reason="left out: per-node checks errored")
    series = _series(check, outputs, verdict)
    with db_phase("record"):
        return services.record_from_check(
            result=result,
            claim=claim,
            verdict=verdict,
            measurements=measurements,
            outputs=outputs,
            series=series,
            attribution={h: {"status": v.status, "reason": v.reason} for h, v in attribution.items()},
            node_set=str(NodeSet.fromlist([n.hostname for n in members])),
        )


def group_members(run: Run) -> tuple[list[Node], list[str]]:
    """The run's nodes in hostname order, less those whose per-node checks errored."""
    nodes = {r.node_id: r.node for r in run.results.filter(scope="node").select_related("node__cluster")}
    if not nodes:  # a plan of group checks only: every node of the run
        from ClusterShell.NodeSet import NodeSet as _NodeSet

        names = list(_NodeSet(run.node_set))
        members = list(Node.objects.filter(cluster=run.cluster, hostname__in=names).select_related("cluster"))
        return sorted(members, key=lambda n: n.hostname), []
    errored = set(run.results.filter(scope="node", status=Status.ERROR).values_list("node_id", flat=True))
    members = sorted((n for pk, n in nodes.items() if pk not in errored), key=lambda n: n.hostname)
    excluded = sorted(n.hostname for pk, n in nodes.items() if pk in errored)
    return members, excluded


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
    visibility timeout. The worker enqueues with these and the reaper judges by them."""
    from worker.timeouts import group_task_limits

    check = get_check(item["kind"])
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


def _localise(
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
    outputs: list[CommandOutput] = []
    measurements: list[Measurement] = []
    pair_verdicts: dict[tuple[str, str], Verdict] = {}
    by_name = {n.hostname: n for n in group.nodes}
    budget = pair_run_budget(check, params)
    not_run = 0

    def run_pair(index: int, a: NodeContext, b: NodeContext) -> tuple[list[CommandOutput], list[Measurement], Verdict]:
        pair = GroupContext(nodes=(a, b), launcher=group.launcher, tag=f"{group.tag}-pair{index}")
        pair_outputs = _run_commands(transport, check.group_commands(params, pair))
        pair_measurements, pair_verdict = run_group_check(check, params, thresholds, pair_outputs, pair)
        for m in pair_measurements:
            m.labels = {**(m.labels or {}), "pair": f"{a.hostname},{b.hostname}"}
        pair_measurements.append(
            Measurement(
                name="pair_status",
                text=pair_verdict.status,
                labels={"pair": f"{a.hostname},{b.hostname}", "reason": pair_verdict.reason[:200]},
            )
        )
        return pair_outputs, pair_measurements, pair_verdict

    tags = itertools.count()
    at_once = max(1, parallelism)
    refused_note = ""

    def run_batch(batch: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Runs one batch and records its pairs; returns the pairs the launcher refused a session."""
        nonlocal at_once, refused_note
        jobs = [(next(tags), by_name[a], by_name[b]) for a, b in batch]
        if len(jobs) == 1:
            done: list[Any] = [run_pair(*jobs[0])]
        else:
            with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="kiln-pair") as pool:
                futures = [pool.submit(run_pair, *job) for job in jobs]
            done = [f.exception() or f.result() for f in futures]
        refused: list[tuple[str, str]] = []
        for (_, a, b), outcome in zip(jobs, done, strict=True):
            if isinstance(outcome, SessionRefusedError) and at_once > 1:
                refused.append((a.hostname, b.hostname))
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            pair_outputs, pair_measurements, pair_verdict = outcome
            outputs.extend(pair_outputs)
            measurements.extend(pair_measurements)
            pair_verdicts[(a.hostname, b.hostname)] = pair_verdict
        if refused:
            # The launcher's sshd allows fewer sessions per connection (MaxSessions): fewer at once.
            at_once = max(1, min(at_once, len(batch)) // 2)
            refused_note = f"the launcher refused more sessions; pairs ran {at_once} at a time"
        return refused

    def run_pairs(pairs: list[tuple[str, str]]) -> None:
        nonlocal not_run
        pending = list(pairs)
        while pending:
            if deadline is not None and time.monotonic() + budget > deadline:
                not_run += len(pending)
                return
            batch = pair_batches(pending, at_once)[0]
            refused = run_batch(batch)
            pending = refused + [pair for pair in pending if pair not in batch]

    ring = ring_pairs([n.hostname for n in group.nodes])
    run_pairs(ring)
    ring_complete = not not_run
    cleared = sorted({n for pair, v in pair_verdicts.items() if v.status == PASS for n in pair})
    if cleared and not not_run:
        verification: list[tuple[str, str]] = []
        for index, suspect in enumerate(sorted(check.localise(pair_verdicts).node_verdicts)):
            partners = [c for c in cleared if c != suspect and (suspect, c) not in pair_verdicts]
            partners = [c for c in partners if (c, suspect) not in pair_verdicts]
            if partners:
                verification.append((suspect, partners[index % len(partners)]))
        run_pairs(verification)
    localised = check.localise(pair_verdicts)
    if localised.node_verdicts:
        # Clear the others by name: a node with a good pair is not the one slowing the group.
        suspects = set(localised.node_verdicts)
        for (a, b), verdict in pair_verdicts.items():
            if verdict.status != PASS:
                continue
            for node, peer in ((a, b), (b, a)):
                if node not in suspects and node not in localised.node_verdicts:
                    localised.node_verdicts[node] = Verdict(status=PASS, reason=f"pair with {peer} within spec")
    if refused_note:
        localised = GroupVerdict(
            status=localised.status,
            reason=f"{localised.reason} ({refused_note})" if localised.reason else refused_note,
            node_verdicts=localised.node_verdicts,
        )
    if not_run:
        cut = f"localisation cut short by the task's time budget: {not_run} pair run(s) left out"
        if not ring_complete:
            cut += ", and no verification pairs"
        for node, verdict in localised.node_verdicts.items():
            if verdict.status != PASS:
                localised.node_verdicts[node] = Verdict(status=verdict.status, reason=f"{verdict.reason} (unverified)")
        localised = GroupVerdict(
            status=localised.status,
            reason=f"{localised.reason}; {cut}" if localised.reason else cut,
            node_verdicts=localised.node_verdicts,
        )
    return outputs, measurements, localised


def _join(group: Verdict, localised: Verdict) -> str:
    return f"{group.reason}; pairwise: {localised.reason}" if group.reason else localised.reason


def execute_run_inline(*, run_id: int, node_ids: list[int], max_workers: int = 32) -> None:
    """Run a whole run in this process (kiln_run --inline): node checks in threads, then groups."""
    from django.db import connection

    def one(node_id: int) -> None:
        try:
            execute_node(run_id=run_id, node_id=node_id, claim=f"inline-{run_id}-{node_id}")
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(node_ids)))) as pool:
        list(pool.map(one, node_ids))
    while True:
        services.run_finalize(run_id=run_id, dispatch=False)
        group = CheckResult.objects.filter(run_id=run_id, scope="group", status=Status.QUEUED).order_by("position")
        result = group.first()
        if result is None:
            break
        CheckResult.objects.filter(pk=result.pk, claimed_by="").update(claimed_by="dispatched")
        execute_group(run_id=run_id, result_id=result.pk, claim=f"inline-group-{result.pk}")
    services.run_finalize(run_id=run_id, dispatch=False)
