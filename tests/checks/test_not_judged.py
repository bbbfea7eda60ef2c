"""No threshold means "not judged": warn at most, never a bare pass.

Before: with the `generic` profile fs_throughput passed any rate and ib_ports passed 1 of 8 ports
active, with no word that nothing was judged; localising from zero node pairs passed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from checks import get_check, run_check
from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    WARN,
    Check,
    Command,
    CommandOutput,
    Finding,
    GroupContext,
    Measurement,
    NodeContext,
    Verdict,
)
from checks.core.localise import conclude, simulate, start
from checks.core.profiles import resolve_thresholds
from checks.fs.throughput import FsAggregate
from checks.rdma.infiniband import IbPorts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IBSTAT = FIXTURES / "ibstat" / "ibstat_H100_node_8xNDR400_some_down.txt"
FIO = FIXTURES / "fio" / "fio_3.16_randrw_qd1_numjobs16_fs_json.json"
NODE = NodeContext(hostname="gpu001")


def ib(stdout: str, profile: str = "generic", node: NodeContext = NODE):
    cmd = Command(argv=("ibstat",), timeout=30, label="ibstat")
    thresholds = resolve_thresholds("ib_ports", profile)
    return run_check(get_check("ib_ports"), None, thresholds, [CommandOutput(cmd, stdout, "", 0)], node)


def first_ca_only(text: str) -> str:
    """The fixture's first HCA block: one InfiniBand port (the other seven CAs left out)."""
    return text[: text.index("CA '", 1)]


# --- ib_ports -------------------------------------------------------------------------------------


def test_ib_ports_on_generic_warns_not_judged_with_all_ports_up() -> None:
    measurements, verdict = ib(IBSTAT.read_text())
    assert verdict.status == WARN
    assert verdict.reason == (
        "8 InfiniBand ports Active at 400 Gb/s: port count and rate not judged "
        "(no expected_ports / expected_rate_gbps set); compared with the run's majority"
    )
    count = next(m for m in measurements if m.name == "ports_active")
    assert (count.value, count.labels) == (8, {"link_layers": "InfiniBand"})


def test_ib_ports_on_generic_never_passes_one_port_of_eight() -> None:
    _, verdict = ib(first_ca_only(IBSTAT.read_text()))
    assert verdict.status == WARN
    assert verdict.reason.startswith("1 InfiniBand ports Active at 400 Gb/s: port count and rate not judged")


def test_ib_ports_with_a_profile_still_passes_and_records_the_count_it_judged() -> None:
    measurements, verdict = ib(IBSTAT.read_text(), "H100-SXM-8")
    assert (verdict.status, verdict.reason) == (PASS, "8 InfiniBand ports Active at 400 Gb/s")
    count = next(m for m in measurements if m.name == "ports_active")
    assert (count.threshold, count.ok, count.labels["expected"]) == ("== 8", True, "8")


def test_ib_consensus_fails_the_node_below_the_run_majority() -> None:
    full, single = IBSTAT.read_text(), first_ca_only(IBSTAT.read_text())
    per_node = {f"gpu{i:02d}": ib(full)[0] for i in range(1, 8)}
    per_node["gpu08"] = ib(single)[0]
    assert IbPorts.consensus(per_node) == {"gpu08": "1 active InfiniBand ports, 7 of 8 nodes have 8"}


def test_ib_consensus_names_a_slower_port_and_never_a_faster_node() -> None:
    full = IBSTAT.read_text()
    per_node = {f"gpu{i:02d}": ib(full)[0] for i in range(1, 4)}
    per_node["gpu04"] = ib(full.replace("Rate: 400", "Rate: 200", 1))[0]
    assert IbPorts.consensus(per_node) == {
        "gpu04": "slowest active port at 200 Gb/s, 3 of 4 nodes have 400 Gb/s",
    }
    # Two nodes of four down to one port: no strict majority below, the others are not "odd".
    per_node["gpu03"] = ib(first_ca_only(full))[0]
    per_node["gpu02"] = ib(first_ca_only(full))[0]
    assert "gpu01" not in IbPorts.consensus(per_node)


def test_ib_consensus_leaves_counts_judged_against_a_profile_alone() -> None:
    full = IBSTAT.read_text()
    per_node = {f"gpu{i:02d}": ib(full, "H100-SXM-8")[0] for i in range(1, 4)}
    per_node["gpu04"] = ib(first_ca_only(full), "H100-SXM-8")[0]  # already `fail` on its own
    assert IbPorts.consensus(per_node) == {}


# --- filesystem ---------------------------------------------------------------------------------


def fio_output() -> list[CommandOutput]:
    return [CommandOutput(Command(argv=("fio",), timeout=60, label="fio"), FIO.read_text(), "", 0)]


def test_fs_throughput_with_one_floor_judges_it_and_warns_on_the_other() -> None:
    # The fixture is a 4 KiB random read/write run: ~0.45 MB/s each way.
    thresholds = {"min_write_gbps": 0.0001}
    measurements, verdict = run_check(get_check("fs_throughput"), None, thresholds, fio_output(), NODE)
    assert verdict.status == WARN
    assert verdict.reason == "read 0 GB/s: not judged (no min_read_gbps floor set)"
    write = next(m for m in measurements if m.name == "write_bw_sum")
    assert (write.threshold, write.ok) == (">= 0.0001 GB/s", True)


def test_fs_throughput_on_generic_never_passes_any_rate() -> None:
    doc = json.loads(FIO.read_text())
    for job in doc["jobs"]:
        for ddir in ("read", "write"):
            job[ddir]["bw_bytes"] = 1  # one byte per second
    cmd = Command(argv=("fio",), timeout=60, label="fio")
    out = [CommandOutput(cmd, json.dumps(doc), "", 0)]
    _, verdict = run_check(get_check("fs_throughput"), None, resolve_thresholds("fs_throughput", "generic"), out, NODE)
    assert verdict.status == WARN
    assert "not judged" in verdict.reason


def client_mode(hosts: list[str], rate: int = 10**9) -> str:
    entries = [
        {
            "jobname": job,
            "hostname": host,
            "error": 0,
            "read": {"bw_bytes": rate if job == "seqread" else 0, "iops": 10.0, "io_bytes": 64 << 20},
            "write": {"bw_bytes": rate if job == "seqwrite" else 0, "iops": 10.0, "io_bytes": 64 << 20},
        }
        for host in hosts
        for job in ("seqwrite", "seqread")
    ]
    return json.dumps({"fio version": "fio-3.33", "client_stats": entries})


def judge_aggregate(hosts: list[str], thresholds: dict[str, Any]):
    check = FsAggregate()
    cmd = Command(argv=("sh", "-c", "fio"), timeout=60, label="fio")
    out = [CommandOutput(cmd, client_mode(hosts), "", 0)]
    group = GroupContext(nodes=tuple(NodeContext(h) for h in hosts), launcher=NodeContext(hosts[0]))
    from checks.core.base import run_group_check

    return run_group_check(check, None, thresholds, out, group)


def test_fs_aggregate_judges_nodes_against_each_other_and_says_the_sum_is_not_judged() -> None:
    measurements, verdict = judge_aggregate(["gpu01", "gpu02", "gpu03"], {})
    assert verdict.status == PASS
    assert "(aggregate not judged: no min_aggregate_write_gbps set)" in verdict.reason
    rates = [m for m in measurements if m.name == "write_bw_sum" and m.labels.get("node")]
    assert {(m.threshold, m.ok) for m in rates} == {(">= 70% of the median node", True)}


def test_fs_aggregate_with_nothing_to_compare_warns() -> None:
    _, verdict = judge_aggregate(["gpu01", "gpu02"], {"max_node_deficit_pct": None})
    assert verdict.status == WARN
    assert "not judged (no min_aggregate_write_gbps, no node comparison)" in verdict.reason


# --- the run_check backstop and localisation -----------------------------------------------------


@dataclass
class _NoParams:
    pass


class _RecordsOnly(Check):
    """A check that measures a temperature and passes without comparing it with anything."""

    key: ClassVar[str] = "records_only"
    name: ClassVar[str] = "records only"
    Params: ClassVar[type] = _NoParams
    Thresholds: ClassVar[type] = _NoParams

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        return [Measurement(name="temperature", value=float(outputs[0].stdout), unit="C")]

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        return Verdict.from_findings([Finding(PASS, "recorded")], pass_reason="42 C")


def test_a_pass_that_judged_no_measured_quantity_becomes_warn() -> None:
    out = [CommandOutput(Command(argv=("sensor",), timeout=5), "42", "", 0)]
    _, verdict = run_check(_RecordsOnly, None, None, out, NODE)
    assert (verdict.status, verdict.reason) == (
        WARN,
        "not judged: no threshold applied to any measurement (42 C)",
    )


def test_the_backstop_leaves_a_judged_pass_alone() -> None:
    class Judged(_RecordsOnly):
        def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
            measurements[0].threshold, measurements[0].ok = "<= 90", True
            return Verdict(PASS, "42 C <= 90")

    out = [CommandOutput(Command(argv=("sensor",), timeout=5), "42", "", 0)]
    assert run_check(Judged, None, None, out, NODE)[1].status == PASS


def test_the_backstop_errors_on_an_impossible_value_before_evaluate() -> None:
    out = [CommandOutput(Command(argv=("sensor",), timeout=5), "-273.15", "", 0)]
    measurements, verdict = run_check(_RecordsOnly, None, None, out, NODE)
    assert (verdict.status, verdict.reason, measurements) == (
        ERROR,
        "impossible evidence: temperature = -273.15 C (a temperature must be a number in -40..150)",
        [],
    )


def test_a_localisation_that_ran_nothing_is_an_error_not_a_pass() -> None:
    verdict = conclude(start(["a", "b", "c"], Verdict(FAIL, "slow")))
    assert verdict.status == ERROR and verdict.node_verdicts == {}
    assert verdict.reason.startswith("no sub-run was run")
    # With sub-runs it still localises.
    blamed = conclude(simulate(["a", "b", "c"], lambda nodes: "a" in nodes, capacity=8))
    assert (blamed.status, [h for h, v in blamed.node_verdicts.items() if v.status != PASS]) == (FAIL, ["a"])
