"""Running one node's share of a run: one connection, the plan items in order, results recorded.

This is the service the node task calls. It touches the network only through `worker.ssh`.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from checks.base import ERROR, NodeContext, Verdict, get_check, run_check
from portal.inventory.models import Node
from portal.runs import services
from portal.runs.models import CheckResult, Run, Status
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
    """Run every unfinished check of one node in this run. Returns how many results it recorded."""
    results = services.results_claim(run_id=run_id, node_id=node_id, claim=claim)
    if not results:
        return 0
    services.run_mark_started(run_id=run_id)
    run = Run.objects.select_related("cluster").get(pk=run_id)
    node = Node.objects.select_related("cluster").get(pk=node_id)
    target = node_target(node)
    try:
        transport = open_transport(target)
    except TransportError as exc:
        reason = f"{exc.kind}: {exc.message}"
        logger.warning("run %s node %s: %s", run_id, node.hostname, reason)
        return services.results_fail_remaining(
            run_id=run_id, node_id=node_id, claim=claim, status=Status.ERROR, reason=reason
        )
    recorded = 0
    try:
        for result in results:
            if _run_one(run=run, node=node, result=result, transport=transport, claim=claim):
                recorded += 1
    except TransportError as exc:
        recorded += services.results_fail_remaining(
            run_id=run_id, node_id=node_id, claim=claim, status=Status.ERROR, reason=f"{exc.kind}: {exc.message}"
        )
    except Exception as exc:
        # A bug must not leave results `running` forever: record it, then let Celery log the traceback.
        logger.exception("run %s node %s: internal error", run_id, node.hostname)
        services.results_fail_remaining(
            run_id=run_id,
            node_id=node_id,
            claim=claim,
            status=Status.ERROR,
            reason=f"internal error in Kiln: {type(exc).__name__}: {exc}",
        )
        raise
    finally:
        transport.close()
    return recorded


def _run_one(*, run: Run, node: Node, result: CheckResult, transport: Transport, claim: str) -> bool:
    item = snapshot_item(run, result.item_key)
    check = get_check(item["kind"])
    params = check.make_params(item["params"])
    thresholds_raw = dict(item["thresholds"])
    if item["kind"] == "gpu_inventory" and node.expected_gpus:
        thresholds_raw["expected_gpu_count"] = node.expected_gpus  # a node-level exception to the profile
    thresholds = check.make_thresholds(thresholds_raw)
    context = NodeContext(hostname=node.hostname, expected_gpus=node.expected_gpus)
    outputs = []
    for command in check.commands(params, context):
        output = transport.run(command)
        outputs.append(output)
        if output.timed_out:
            break  # the rest would only wait on the same hung device
    measurements, verdict = run_check(check, params, thresholds, outputs, context)
    if not outputs:
        verdict = Verdict(status=ERROR, reason="the check produced no command to run")
    return services.record_from_check(
        result=result, claim=claim, verdict=verdict, measurements=measurements, outputs=outputs
    )
