"""Running a fan-out group check (checks/core/fanout.py, the heat soak): every member node runs its own
commands over its own connection, all starting at one common moment, while the facility's Redfish
endpoints are read (worker/redfish.py); then the check judges everything at once.

Each node's commands carry the result's tag and their process groups are recorded, so a cancel
(the result closed under the task) stops them on every node, over a new connection each. A node
that cannot be reached is that node's `error`, named in the verdict; the others still soak.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

from checks.core.base import Command, CommandOutput, GroupContext, Measurement, Series, Verdict
from checks.core.fanout import FACILITY_LABEL, FanOutCheck, facility_document, run_fan_out_check
from portal.execution.execution import node_target
from portal.facility.selectors import facility_endpoints, facility_snapshot
from portal.inventory.models import Node
from portal.runs import leases
from portal.runs.models import CheckResult, Run
from worker.endpoints import Endpoint
from worker.procgroup import stop_group, tag_for
from worker.redfish import sample_endpoint
from worker.ssh import TransportError, open_transport
from worker.transport import REMOTE_KILL_GRACE_S

logger = logging.getLogger(__name__)


@dataclass
class FanOutRun:
    """What a fan-out check produced, before it is recorded."""

    outputs: list[CommandOutput]
    measurements: list[Measurement]
    verdict: Verdict
    attribution: dict[str, Verdict]
    series: list[Series]


@dataclass
class _Live:
    """The process groups running on each node for this result (host -> pgids)."""

    pgids: dict[str, set[int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def started(self, host: str, pgid: int) -> None:
        with self.lock:
            self.pgids.setdefault(host, set()).add(pgid)

    def clear(self, host: str) -> None:
        with self.lock:
            self.pgids.pop(host, None)

    def snapshot(self) -> dict[str, set[int]]:
        with self.lock:
            return {h: set(p) for h, p in self.pgids.items() if p}


def run_fan_out(
    *,
    check: FanOutCheck,
    params: Any,
    thresholds: Any,
    run: Run,
    result: CheckResult,
    members: list[Node],
    group: GroupContext,
    holding: leases.Holding,
) -> FanOutRun:
    """Start every member at the common moment, sample the facility, judge (see the module docstring)."""
    model = facility_snapshot(cluster=run.cluster) if check.needs_facility else None
    start_at = time.time() + check.start_delay_s(params, len(members))
    group = replace(group, start_at=start_at, facility=model)
    endpoints = facility_endpoints(cluster=run.cluster) if check.facility_readers else []
    tag = tag_for(result.pk, result.attempt)
    live, stop = _Live(), threading.Event()
    by_host = {n.hostname: n for n in members}
    contexts = {c.hostname: c for c in group.nodes}
    holding.command_starting(result)
    with ThreadPoolExecutor(max_workers=len(members) + len(endpoints)) as pool:
        facility = [pool.submit(_sample, check, params, e, start_at, stop) for e in endpoints]
        nodes = {
            pool.submit(_node, by_host[h], check.node_commands(params, group, contexts[h]), tag, live): h
            for h in sorted(by_host)
        }
        _wait_or_stop(nodes, result, holding, live, by_host, tag, stop)
        stop.set()  # the nodes are done: endpoint readings past their end add nothing
        per_node = {nodes[f]: f.result() for f in nodes}
        readings = [f.result() for f in facility]
    facility_outputs = [_facility_output(readings, model)] if endpoints or model is not None else []
    measurements, verdict, series = run_fan_out_check(check, params, thresholds, per_node, facility_outputs, group)
    outputs = [o for h in sorted(per_node) for o in per_node[h]] + facility_outputs
    return FanOutRun(outputs, measurements, verdict, dict(verdict.node_verdicts), series)


def _sample(
    check: FanOutCheck, params: Any, endpoint: Endpoint, start_at: float, stop: threading.Event
) -> dict[str, Any]:
    reader = check.facility_readers.get(endpoint.kind)
    if reader is None:
        return {"kind": endpoint.kind, "name": endpoint.name, "t": [], "readings": {}, "errors": ["no reader"]}
    duration = float(params.duration_s)
    interval = float(params.sample_interval_s)
    return sample_endpoint(
        endpoint,
        link=reader.link,
        read=reader.read,
        start_at=start_at,
        duration_s=duration,
        interval_s=interval,
        stop=stop,
    )


def _node(node: Node, commands: list[Command], tag: str, live: _Live) -> list[CommandOutput]:
    """One node's commands over its own connection; an unreachable node is an output saying so."""
    host = node.hostname
    try:
        transport = open_transport(node_target(node))
    except TransportError as exc:
        return [_unreached(commands[0], exc)]
    outputs: list[CommandOutput] = []
    try:
        for command in commands:

            def on_start(pgid: int) -> None:
                live.started(host, pgid)

            output = transport.run(command, tag=tag, on_start=on_start)
            live.clear(host)
            outputs.append(output)
            if output.timed_out:
                break
    except TransportError as exc:
        outputs.append(_unreached(commands[len(outputs)], exc))
    finally:
        transport.close()
    return outputs


def _unreached(command: Command, exc: TransportError) -> CommandOutput:
    return CommandOutput(command=command, stdout="", stderr=f"{exc.kind}: {exc.message}", exit_code=None)


def _wait_or_stop(
    nodes: dict[Future[list[CommandOutput]], str],
    result: CheckResult,
    holding: leases.Holding,
    live: _Live,
    by_host: dict[str, Node],
    tag: str,
    stop: threading.Event,
) -> None:
    """Wait for every node; when the result is closed under the task (cancel), stop every node's
    process group and raise CheckStopped once they have ended."""
    pending = set(nodes)
    while pending:
        _done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
        if holding.is_stopped(result.pk):
            stop.set()
            _stop_all(live, by_host, tag)
            wait(pending, timeout=REMOTE_KILL_GRACE_S + 30)
            raise leases.CheckStopped(f"result {result.pk} is {holding.closed[result.pk]}")


def _stop_all(live: _Live, by_host: dict[str, Node], tag: str) -> None:
    running = live.snapshot()
    if not running:
        return
    with ThreadPoolExecutor(max_workers=min(64, len(running))) as pool:
        for host, pgids in running.items():
            for pgid in pgids:
                pool.submit(_stop_one, by_host[host], pgid, tag)


def _stop_one(node: Node, pgid: int, tag: str) -> None:
    try:
        transport = open_transport(node_target(node))
        try:
            stop_group(transport, pgid=pgid, tag=tag, grace_s=REMOTE_KILL_GRACE_S)
        finally:
            transport.close()
    except Exception:  # the remote timeout still ends it; the reaper retries on a lapsed lease
        logger.exception("%s: could not stop process group %s", node.hostname, pgid)


def _facility_output(readings: list[dict[str, Any]], model: dict[str, Any] | None) -> CommandOutput:
    """The endpoints' readings and the facility model judged against, stored as the evidence."""
    names = ", ".join(str(r.get("name")) for r in readings) or "no endpoint"
    command = Command(argv=("redfish", "GET", names), timeout=0.0, label=FACILITY_LABEL)
    return CommandOutput(command=command, stdout=facility_document(readings, model), stderr="", exit_code=0)
