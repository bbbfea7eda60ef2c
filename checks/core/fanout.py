"""Fan-out group checks: every node runs its own commands at one common moment, each over its own
connection, while the worker samples the facility's Redfish endpoints (the heat soak).

A `FanOutCheck` declares:
- `node_commands(params, group, node)`: what one node runs, starting at `group.start_at`;
- params `start_slack_s` and `start_per_node_s`: `start_delay_s(params, node_count)` (here) is how
  long before the common start the commands are sent, so that every node's command has begun by
  then;
- `facility_readers`: per endpoint kind ("pdu", "loop"), the Redfish link whose members are read
  every interval and the pure function that turns those members' documents into readings;
- `judge_fan_out(params, thresholds, per_node, facility, group)`: measurements, a GroupVerdict with
  per-node attribution, and the series to store.

The executor (portal/execution/fanout.py) runs the commands and the sampler; `run_fan_out_check` applies
the rules every check obeys (checks/core/base.py): a parser or judge crash is `error`, impossible
evidence is `error`, a pass on a truncated output is `error`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core import evidence as impossible_evidence
from checks.core.base import (
    ERROR,
    PASS,
    WARN,
    Command,
    CommandOutput,
    EvidenceError,
    Finding,
    GroupCheck,
    GroupContext,
    GroupVerdict,
    Measurement,
    NodeContext,
    ParamsError,
    Series,
)

# The facility sampler's output: one command output whose stdout is the readings document.
FACILITY_LABEL = "facility readings"
FACILITY_SCHEMA = 1

Readings = dict[str, float | None]


@dataclass(frozen=True)
class FacilityReader:
    """How one kind of facility endpoint is read: the Redfish property of the configured resource
    whose collection members are fetched each interval (e.g. a RackPDU's "Mains"), and the pure
    function turning those members' documents into named readings (e.g. phase "1" -> amps)."""

    link: str
    read: Callable[[list[str]], Readings]


class FanOutCheck(GroupCheck):
    """A group check whose nodes each run their own commands at one common moment."""

    facility_readers: ClassVar[dict[str, FacilityReader]] = {}
    # The group context carries the cluster's facility model (portal/facility facility_snapshot).
    needs_facility: ClassVar[bool] = False
    # The node-side program that waits for the common start (the probe, the perftest runner)
    # refuses a start more than 600 s ahead (a wrong clock); 10 s under it for the commands' transit.
    MAX_START_DELAY_S: ClassVar[float] = 590.0
    # What a run over too many nodes should do instead, named in the refusal.
    fewer_nodes_advice: ClassVar[str] = "run fewer nodes at once"

    def group_commands(self, params: Any, group: GroupContext) -> list[Command]:
        return self.node_commands(params, group, group.launcher)

    def stand_in_commands(self, params: Any, node_count: int = 2) -> list[Command]:
        # The nodes run in parallel: one node's commands are the run's time budget, and their start
        # waits longer the more nodes there are (start_delay_s).
        nodes = tuple(NodeContext(hostname=f"node-{i}") for i in range(max(1, node_count)))
        group = GroupContext(nodes=nodes, launcher=nodes[0], tag="budget", start_at=0.0)
        return self.node_commands(params, group, nodes[0])

    def timeout(self, params: Any) -> float:
        # One node's commands at a placeholder start: `commands` has no common start time to give.
        return sum(c.timeout for c in self.stand_in_commands(params))

    def node_commands(self, params: Any, group: GroupContext, node: NodeContext) -> list[Command]:
        raise NotImplementedError

    def start_delay_s(self, params: Any, node_count: int) -> float:
        """Seconds between sending the commands and the common start: a slack, and a share per node
        (the executor opens one connection per node in turn). Params `start_slack_s` and
        `start_per_node_s` set it; too many nodes for the node program's limit is refused."""
        delay = float(params.start_slack_s + params.start_per_node_s * node_count)
        if delay > self.MAX_START_DELAY_S:
            raise ParamsError(
                f"{node_count} nodes need a {delay:.0f} s start delay, over the {self.MAX_START_DELAY_S:.0f} s limit "
                f"of the program that waits for the start: {self.fewer_nodes_advice}, or lower start_per_node_s"
            )
        return delay

    def judge_fan_out(
        self,
        params: Any,
        thresholds: Any,
        per_node: dict[str, list[CommandOutput]],
        facility: list[CommandOutput],
        group: GroupContext,
    ) -> tuple[list[Measurement], GroupVerdict, list[Series]]:
        raise NotImplementedError

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        raise EvidenceError(f"{self.key} is judged from every node's output at once, not from one output")

    def evaluate_group(self, measurements: list[Measurement], thresholds: Any, group: GroupContext) -> GroupVerdict:
        raise EvidenceError(f"{self.key} is judged from every node's output at once, not from one output")


def facility_document(endpoints: list[dict[str, Any]], model: dict[str, Any] | None = None) -> str:
    """The sampler's readings, and the facility model they were judged against, as the stored
    evidence (compact JSON)."""
    doc: dict[str, Any] = {"schema": FACILITY_SCHEMA, "endpoints": endpoints}
    if model is not None:
        doc["model"] = model
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


def run_fan_out_check(
    check: FanOutCheck,
    params: Any,
    thresholds: Any,
    per_node: dict[str, list[CommandOutput]],
    facility: list[CommandOutput],
    group: GroupContext,
) -> tuple[list[Measurement], GroupVerdict, list[Series]]:
    """judge_fan_out under the rules of every check (no crash, no impossible evidence, no pass on a
    cut output)."""
    if isinstance(thresholds, dict) or thresholds is None:
        thresholds = check.make_thresholds(thresholds)
    try:
        measurements, verdict, series = check.judge_fan_out(params, thresholds, per_node, facility, group)
        impossible = impossible_evidence.problems(measurements, check.evidence)
    except EvidenceError as exc:
        return [], GroupVerdict(status=ERROR, reason=str(exc)), []
    except Exception as exc:  # a judge bug must not become a pass, nor crash the executor
        reason = f"internal error in {check.key} judgement: {type(exc).__name__}: {exc}"
        return [], GroupVerdict(status=ERROR, reason=reason), []
    if impossible:
        return [], GroupVerdict(status=ERROR, reason=impossible_evidence.reason(impossible)), []
    cut = [o for outs in per_node.values() for o in outs if o.truncated] + [o for o in facility if o.truncated]
    if cut and verdict.status in (PASS, WARN):
        reason = (
            f"output truncated by the transport ({len(cut)} outputs over its read cap); what was cut cannot be judged"
        )
        verdict = GroupVerdict(
            status=ERROR,
            reason=reason,
            findings=[*verdict.findings, Finding(ERROR, reason)],
            node_verdicts=dict(verdict.node_verdicts),
        )
    return measurements, verdict, series
