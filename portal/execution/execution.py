"""Running one node's share of a run: one connection, the plan items in order, results recorded.

This is the service the node task calls. It touches the network only through `worker.ssh`.

A worker runs many node tasks at once on threads, so a task holds no database connection while it
waits on its node: its database work is done in short phases (worker.db.db_phase: claim, record
one result, close the run), each closing the thread's connection when it ends. One SSH connection
serves every command of the node's checks, and identical read-only reads (the probe) run once
(worker.shared_reads).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from checks.core.base import (
    ERROR,
    Check,
    CommandOutput,
    NodeContext,
    Series,
    Verdict,
    get_check,
    run_check,
)
from portal.inventory.models import Node
from portal.runs import leases, services
from portal.runs.dbretry import portal_fault_reason
from portal.runs.models import CheckResult, Run, Status
from portal.runs.pairs import run_commands
from worker.db import db_phase, ledger, timed
from worker.shared_reads import SharedReads
from worker.ssh import NodeTarget, Transport, TransportError, open_transport

logger = logging.getLogger(__name__)


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
    with db_phase("claim"):  # one phase: the claim and what the task reads to run the claimed checks
        results = services.results_claim(run_id=run_id, node_id=node_id, claim=claim)
        if not results:
            return 0
        services.run_mark_started(run_id=run_id)
        run = Run.objects.select_related("cluster").get(pk=run_id)
        node = Node.objects.select_related("cluster").get(pk=node_id)
    with leases.held(claim=claim, results=results, label=node.hostname) as holding:
        return _execute_held(run=run, node=node, claim=claim, results=results, holding=holding)


def _execute_held(*, run: Run, node: Node, claim: str, results: list[CheckResult], holding: leases.Holding) -> int:
    run_id, node_id = run.pk, node.pk
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
        for index, result in enumerate(results):
            if holding.is_stopped(result.pk):
                continue  # cancelled (or reaped) before it started
            holding.begin(result)
            following = next((r for r in results[index + 1 :] if not holding.is_stopped(r.pk)), None)
            try:
                if _run_one(
                    run=run,
                    node=node,
                    result=result,
                    transport=transport,
                    claim=claim,
                    holding=holding,
                    following=following,
                ):
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
        with timed("disconnect"):
            transport.close()
        _note_reads(node, transport)
    return recorded


def _note_reads(node: Node, transport: SharedReads) -> None:
    book = ledger()
    if book is not None:
        book.notes.update(node=node.hostname, commands_run=transport.ran, commands_shared=transport.shared)


def _run_one(
    *,
    run: Run,
    node: Node,
    result: CheckResult,
    transport: Transport,
    claim: str,
    holding: leases.Holding,
    following: CheckResult | None,
) -> bool:
    """Run one check and record it. The record also marks `following` (the check this task runs
    next) as starting its commands: the mark a command waits for (leases.Holding.command_starting)
    is then already written, instead of being a write of its own a moment later."""
    item = snapshot_item(run, result.item_key)
    check = get_check(item["kind"])
    params = check.make_params(item["params"])
    # A node's own expected_gpus reaches the checks through NodeContext (gpu_inventory prefers it).
    thresholds = check.make_thresholds(dict(item["thresholds"]))
    context = node_context(run, node)
    with timed("commands"):
        outputs = run_commands(transport, check.commands(params, context))
    with timed("judge"):
        measurements, verdict = run_check(check, params, thresholds, outputs, context)
        if not outputs:
            verdict = Verdict(status=ERROR, reason="the check produced no command to run")
        series = series_of(check, outputs, verdict)
    with timed("prepare"):  # the CPU half of recording, outside the database phase
        record = services.record_prepare_from_check(
            result=result, claim=claim, verdict=verdict, measurements=measurements, outputs=outputs, series=series
        )
    with db_phase("record"):
        recorded = services.record_write(record, starting=following.pk if following is not None else None)
    if recorded and following is not None:
        holding.started_marked(following)
    return recorded


def node_context(run: Run, node: Node) -> NodeContext:
    started = run.started_at or run.created_at
    return NodeContext(
        hostname=node.hostname,
        expected_gpus=node.expected_gpus,
        address=node.address,
        since=started.timestamp() if started else None,
        settings=dict(node.cluster.check_settings or {}),
        rack=node.rack,
        scheduler=node.cluster.scheduler,
    )


def series_of(check: Check, outputs: list[CommandOutput], verdict: Verdict) -> list[Series]:
    if verdict.status == ERROR and not outputs:
        return []
    try:
        return check.series(outputs)
    except Exception:  # a series is an illustration; its failure must not change the verdict
        logger.exception("series of %s failed", check.key)
        return []
