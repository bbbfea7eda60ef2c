"""Filesystem throughput: parsers on real fio/IOR/elbencho outputs, and both checks end to end on
the simulated fio (local mode per node, client mode across a 4-node group)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    WARN,
    Command,
    CommandOutput,
    EvidenceError,
    GroupContext,
    NodeContext,
    ParamsError,
    run_check,
)
from checks.core.parsers import PARSERS
from checks.core.profiles import resolve_thresholds
from checks.fs.throughput import FsAggregate, FsThroughput, load_fio_json
from testbed.sim import SimPaths, build_simulator, node_env, write_state
from worker.ssh import LocalTransport, NodeTarget

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FIO_NVME = FIXTURES / "fio" / "fio_3.16_randrw_4k_nvme_json.json"
FIO_FS = FIXTURES / "fio" / "fio_3.16_randrw_qd1_numjobs16_fs_json.json"
FAST = {"size": "64M", "numjobs": 2, "timeout_s": 60}


def parse(kind: str, path: Path):
    return PARSERS[kind](path.read_text())


def one(measurements, name: str, **labels: str):
    found = [m for m in measurements if m.name == name and all(m.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


# --- parsers on the real fixtures -----------------------------------------------------------------


def test_it_parses_fio_bytes_per_second_not_kib() -> None:
    ms = parse("fio", FIO_NVME).measurements
    read = one(ms, "read_bw", job="rand_read_write")
    assert (read.value, read.unit) == (348743777.0, "B/s")  # bw_bytes; `bw` (340570) is KiB/s
    assert one(ms, "write_iops", job="rand_read_write").value == pytest.approx(85066.128925)
    # lat_percentiles=1 moves percentiles to lat_ns: no clat p99, a lat p99 instead.
    assert not [m for m in ms if m.name == "read_clat_p99"]
    assert one(ms, "read_lat_p99", job="rand_read_write").value == 2244608.0
    assert [m.value for m in ms if m.name == "write_bw_sum"] == [348450387.0]


def test_it_parses_fio_clat_percentiles_of_the_filesystem_run() -> None:
    ms = parse("fio", FIO_FS).measurements
    assert one(ms, "read_clat_p99", job="iotest").value == 509607936.0
    assert one(ms, "write_clat_p99", job="iotest").value == 591396864.0
    assert one(ms, "write_bw", job="iotest").value == 452048.0
    assert one(ms, "read_bytes", job="iotest").value == 26783744.0


def test_it_skips_noise_before_the_fio_json() -> None:
    text = "fio: this platform does not support process shared mutexes, forcing use of threads\n"
    text += "note: both iodepth >= 1 and synchronous I/O engine are selected\n" + FIO_FS.read_text()
    ms = PARSERS["fio"](text).measurements
    assert one(ms, "read_bw", job="iotest").value == 443902.0


def test_it_refuses_fio_text_without_json() -> None:
    with pytest.raises(EvidenceError, match="no JSON result"):
        load_fio_json("fio: pid=123, err=5/file:io_u.c:1787, func=io_u error, error=Input/output error\n")
    with pytest.raises(EvidenceError, match="no job results"):
        PARSERS["fio"](json.dumps({"fio version": "fio-3.16", "jobs": []}))


def test_it_parses_ior_3_0_and_3_2_summaries() -> None:
    old = parse("ior", FIXTURES / "ior" / "ior-3.0.1_posix_shared_file_write_16tasks_akrr.txt").measurements
    new = parse("ior", FIXTURES / "ior" / "ior-3.2.0_posix_write_16tasks_akrr.txt").measurements
    assert [(m.name, m.value, m.unit) for m in old] == [
        ("write_bw_max", 158.39, "MiB/s"),
        ("write_bw_mean", 158.39, "MiB/s"),
    ]
    assert [(m.name, m.value) for m in new] == [("write_bw_max", 104.26), ("write_bw_mean", 104.26)]
    assert new[0].labels["ior_version"] == "3.2.0"


def test_it_reads_ior_from_the_table_without_max_lines() -> None:
    text = (FIXTURES / "ior" / "ior-3.2.0_posix_write_16tasks_akrr.txt").read_text()
    text = "\n".join(line for line in text.splitlines() if not line.startswith("Max Write"))
    ms = PARSERS["ior"](text).measurements
    assert [(m.name, m.value, m.labels["source"]) for m in ms][0] == ("write_bw_max", 104.26, "summary table")


def test_it_parses_elbencho_tables() -> None:
    docs = parse("elbencho", FIXTURES / "elbencho" / "elbencho_multihost_write_1m_table_docs.txt").measurements
    assert one(docs, "throughput", phase="WRITE").value == 33352.0  # LAST DONE: the whole phase
    assert one(docs, "throughput_first_done", phase="WRITE").value == 33395.0
    sweep = parse("elbencho", FIXTURES / "elbencho" / "elbencho_sweep_large_files_56threads_nersc.txt").measurements
    writes = [m for m in sweep if m.name == "throughput"]
    assert len(writes) == 11
    assert (writes[0].value, writes[0].labels) == (10488.0, {"phase": "WRITE", "run": "0"})


def test_it_refuses_text_that_is_not_ior_or_elbencho() -> None:
    with pytest.raises(EvidenceError):
        PARSERS["ior"]("Segmentation fault\n")
    with pytest.raises(EvidenceError):
        PARSERS["elbencho"]("ERROR: Unable to open file\n")


# --- fs_throughput --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> SimPaths:
    return build_simulator(tmp_path_factory.mktemp("sim"))


def make_node(sim: SimPaths, root: Path, host: str, **faults) -> LocalTransport:
    state = root / host / "state"
    write_state(state, node=host, **faults)
    return LocalTransport(NodeTarget(hostname=host, transport="local", local_env=node_env(sim, state)))


def test_it_builds_fio_argv_without_a_shell_built_from_input() -> None:
    params = FsThroughput.make_params({"path": "/lustre/my scratch"})
    [cmd] = FsThroughput().commands(params, NodeContext(hostname="gpu01; rm -rf /"))
    assert cmd.argv[:2] == ("sh", "-c") and "$@" in cmd.argv[2]
    assert cmd.argv[4:6] == ("/lustre/my scratch", "kiln-fio.gpu01__rm_-rf__")
    fio = cmd.argv[6:]
    assert fio[0] == "fio" and "--output-format=json" in fio and "--direct=1" in fio
    assert "--directory=/lustre/my scratch" in fio
    assert fio.index("--name=seqwrite") < fio.index("--stonewall") < fio.index("--unlink=1")


def test_it_rejects_bad_params() -> None:
    with pytest.raises(ParamsError, match="parse-only"):
        FsThroughput.make_params({"engine": "ior"})
    with pytest.raises(ParamsError, match="size"):
        FsThroughput.make_params({"size": "1G; rm"})


def test_it_passes_a_healthy_node_on_the_simulator(sim: SimPaths, tmp_path: Path) -> None:
    node = make_node(sim, tmp_path, "gpu01")
    params = FsThroughput.make_params({**FAST, "path": str(tmp_path)})
    outputs = [node.run(c) for c in FsThroughput().commands(params, NodeContext(hostname="gpu01"))]
    thresholds = resolve_thresholds("fs_throughput", "H100-SXM-8")
    ms, verdict = run_check(FsThroughput, params, thresholds, outputs, NodeContext(hostname="gpu01"))
    assert verdict.status == PASS, verdict.reason
    assert verdict.reason == "write 5 GB/s, read 6 GB/s"
    write = one(ms, "write_bw_sum")
    assert (write.value, write.threshold, write.ok) == (5e9, ">= 2 GB/s", True)
    assert not list(tmp_path.glob("kiln-fio.*"))


def test_it_fails_a_slow_node_naming_the_rate(sim: SimPaths, tmp_path: Path) -> None:
    node = make_node(sim, tmp_path, "gpu02", fs_factor=0.16)
    params = FsThroughput.make_params({**FAST, "path": str(tmp_path)})
    outputs = [node.run(c) for c in FsThroughput().commands(params, NodeContext(hostname="gpu02"))]
    thresholds = resolve_thresholds("fs_throughput", "H100-SXM-8")
    _, verdict = run_check(FsThroughput, params, thresholds, outputs, NodeContext(hostname="gpu02"))
    assert verdict.status == FAIL
    assert verdict.reason == (
        "write 0.8 GB/s below the 2 GB/s per-node floor; read 0.96 GB/s below the 4 GB/s per-node floor"
    )


def test_it_records_without_judging_on_the_generic_profile(sim: SimPaths, tmp_path: Path) -> None:
    # Any rate (here 1% of normal) is recorded; with no floor it is "not judged": warn, never pass.
    node = make_node(sim, tmp_path, "gpu03", fs_factor=0.01)
    params = FsThroughput.make_params({**FAST, "path": str(tmp_path)})
    outputs = [node.run(c) for c in FsThroughput().commands(params, NodeContext(hostname="gpu03"))]
    measurements, verdict = run_check(
        FsThroughput, params, resolve_thresholds("fs_throughput", "generic"), outputs, NodeContext(hostname="gpu03")
    )
    assert verdict.status == WARN
    assert verdict.reason == (
        "write 0.05 GB/s: not judged (no min_write_gbps floor set); "
        "read 0.06 GB/s: not judged (no min_read_gbps floor set)"
    )
    assert next(m for m in measurements if m.name == "write_bw_sum").ok is None


def test_it_errors_when_the_mount_is_missing(sim: SimPaths, tmp_path: Path) -> None:
    node = make_node(sim, tmp_path, "gpu04")
    params = FsThroughput.make_params({**FAST, "path": str(tmp_path / "not-mounted")})
    outputs = [node.run(c) for c in FsThroughput().commands(params, NodeContext(hostname="gpu04"))]
    _, verdict = run_check(FsThroughput, params, None, outputs, NodeContext(hostname="gpu04"))
    assert verdict.status == ERROR
    assert verdict.reason.startswith("fio exited 1: fio:") and "not-mounted" in verdict.reason


def test_it_errors_when_fio_reports_no_read_job() -> None:
    doc = json.loads(FIO_FS.read_text())
    doc["jobs"][0]["read"]["io_bytes"] = 0
    cmd = Command(argv=("fio",), timeout=10, label="fio")
    _, verdict = run_check(
        FsThroughput, None, None, [CommandOutput(cmd, json.dumps(doc), "", 0)], NodeContext(hostname="n")
    )
    assert (verdict.status, verdict.reason) == (ERROR, "fio reported no read I/O (no read job result)")


# --- fs_aggregate ---------------------------------------------------------------------------------


def run_group(sim: SimPaths, root: Path, nodes: list[str], thresholds=None, **faults_by_node):
    for host in nodes:
        make_node(sim, root, host, **faults_by_node.get(host, {}))
    launcher = make_node(sim, root, "launcher")
    group = GroupContext(
        nodes=tuple(NodeContext(hostname=h) for h in nodes),
        launcher=NodeContext(hostname="launcher"),
        tag=f"test-{root.name}",
    )
    check = FsAggregate()
    params = FsAggregate.make_params(FAST)
    outputs = [launcher.run(c) for c in check.group_commands(params, group)]
    measurements, _ = run_check(check, params, thresholds, outputs, NodeContext(hostname="launcher"))
    verdict = check.evaluate_group(measurements, check.make_thresholds(thresholds), group)
    return measurements, verdict, outputs


def test_it_passes_four_healthy_nodes_in_client_mode(sim: SimPaths, tmp_path: Path) -> None:
    ms, verdict, outputs = run_group(sim, tmp_path, ["gpu01", "gpu02", "gpu03", "gpu04"])
    assert verdict.status == PASS, verdict.reason
    assert verdict.reason == (
        "aggregate write 20 GB/s over 4 nodes (aggregate not judged: no min_aggregate_write_gbps set); "
        "aggregate read 24 GB/s over 4 nodes (aggregate not judged: no min_aggregate_read_gbps set)"
    )
    assert verdict.node_verdicts == {}
    assert "client_stats" in outputs[0].stdout
    assert not Path(f"/tmp/kiln-fio-test-{tmp_path.name}.fio").exists()  # job file removed


def test_it_names_the_slow_node_of_the_group(sim: SimPaths, tmp_path: Path) -> None:
    nodes = ["gpu05", "gpu06", "gpu07", "gpu08"]
    _, verdict, _ = run_group(sim, tmp_path, nodes, gpu07={"fs_factor": 0.3})
    assert verdict.status == FAIL
    assert set(verdict.node_verdicts) == {"gpu07"}
    assert verdict.node_verdicts["gpu07"].reason == (
        "gpu07: write 1.5 GB/s, 30% of the median node; gpu07: read 1.8 GB/s, 30% of the median node"
    )


def test_it_judges_the_aggregate_floor(sim: SimPaths, tmp_path: Path) -> None:
    _, verdict, _ = run_group(sim, tmp_path, ["a1", "a2"], {"min_aggregate_write_gbps": 50})
    assert verdict.status == FAIL
    assert "aggregate write 10 GB/s below the 50 GB/s aggregate (2 nodes) floor" in verdict.reason


def test_it_errors_for_a_node_whose_fio_server_is_unreachable(sim: SimPaths, tmp_path: Path) -> None:
    nodes = ["b1", "b2", "b3"]
    for host in nodes[:2]:
        make_node(sim, tmp_path, host)
    launcher = make_node(sim, tmp_path, "launcher")
    group = GroupContext(
        nodes=tuple(NodeContext(hostname=h) for h in nodes),
        launcher=NodeContext(hostname="launcher"),
        tag=f"t-{tmp_path.name}",
    )
    check = FsAggregate()
    params = FsAggregate.make_params(FAST)
    outputs = [launcher.run(c) for c in check.group_commands(params, group)]
    assert outputs[0].exit_code == 1
    ms, _ = run_check(check, params, None, outputs, NodeContext(hostname="launcher"))
    verdict = check.evaluate_group(ms, check.make_thresholds(None), group)
    assert verdict.status == ERROR
    assert verdict.node_verdicts["b3"].status == ERROR
    assert "b3: no fio write/read results" in verdict.reason
    assert "fio: failed to connect to b3:8765" in verdict.reason
