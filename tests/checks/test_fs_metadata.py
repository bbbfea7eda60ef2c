"""Filesystem metadata: the mdtest parser on real outputs (mdtest 3.3.0, 3.4.0+dev, an IO500
summary it refuses), and fs_metadata end to end on the simulated mdtest (testbed/sim/tools/mdtest)."""

from __future__ import annotations

import os
import subprocess
import sys
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
    run_group_check,
)
from checks.core.parsers import PARSERS, parse_output
from checks.fs.metadata import FsMetadata
from checks.fs.metadata_aggregate import FsMetadataAggregate
from checks.fs.metadata_floors import ANY_FLOORS, CLASS_FLOORS
from testbed.sim import TOOLS_DIR, SimPaths, build_simulator, node_env, write_state
from worker.ssh import LocalTransport, NodeTarget

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mdtest"
SJTU = FIXTURES / "mdtest-3.3.0-sjtu-3iter-n100-full.txt"
DAOS = FIXTURES / "mdtest-3.4.0dev-daos-dfuse-posix-create-only.txt"
IO500 = FIXTURES / "io500-sc20_v3-exascaler-cloud-azure-64tasks.txt"
FAST = {"files": 50, "iterations": 2, "timeout_s": 60}
LUSTRE = {"fs_class": "lustre"}


def one(measurements, name: str, **labels: str):
    found = [m for m in measurements if m.name == name and all(m.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def output(text: str, exit_code: int = 0) -> list[CommandOutput]:
    return [CommandOutput(Command(argv=("file",), timeout=10, label="mdtest"), text, "", exit_code)]  # captured


def judge(text: str, thresholds=None, host: str = "gpu03"):
    return run_check(FsMetadata, None, thresholds, output(text), NodeContext(hostname=host))


# --- the parser on the real fixtures --------------------------------------------------------------


def test_it_parses_every_statistic_of_mdtest_3_3() -> None:
    ms = parse_output("mdtest", SJTU.read_text()).measurements
    create = [one(ms, "ops_per_s", operation="file_creation", stat=s).value for s in ("max", "min", "mean", "stddev")]
    assert create == [27976.199, 19203.375, 24963.815, 4074.675]
    assert one(ms, "ops_per_s", operation="file_read", stat="mean").value == 176263.574
    assert one(ms, "ops_per_s", operation="tree_removal", stat="stddev").value == 236.318
    assert one(ms, "ops_per_s", operation="file_stat", stat="max").unit == "ops/s"
    assert {m.labels["operation"] for m in ms if m.name == "ops_per_s"} == {
        "directory_creation", "directory_stat", "directory_removal", "file_creation", "file_stat", "file_read",
        "file_removal", "tree_creation", "tree_removal",
    }  # fmt: skip
    assert (one(ms, "tasks").value, one(ms, "nodes").value, one(ms, "tasks").labels) == (1, 1, {"version": "3.3.0"})
    assert not [m for m in ms if m.name == "small_read_mbps"]  # mdtest -n 100 -i 3: no -e, no bytes read


def test_it_records_the_phases_a_create_only_run_skipped_as_missing() -> None:
    ms = parse_output("mdtest", DAOS.read_text()).measurements
    assert one(ms, "ops_per_s", operation="file_creation", stat="mean").value == 2943.686
    assert one(ms, "ops_per_s", operation="tree_creation", stat="max").value == 1079.858
    stat = one(ms, "ops_per_s", operation="file_stat")
    assert stat.value is None and "did not run" in stat.labels["missing"]
    assert (one(ms, "tasks").value, one(ms, "nodes").value) == (10, 3)
    assert not [m for m in ms if m.name == "small_read_mbps"]  # -e 4096, but the read phase did not run


def test_it_refuses_the_io500_summary_with_a_clear_reason() -> None:
    # IO500's [RESULT] lines are kIOPS totals of whole phases (easy/hard), not mdtest's per-operation
    # max/min/mean: mapping mdtest-easy-write to "file creation" would mix two workloads.
    with pytest.raises(EvidenceError, match="an IO500 summary, not mdtest output"):
        PARSERS["mdtest"](IO500.read_text())


def test_it_requires_the_finished_line() -> None:
    text = SJTU.read_text()
    cut = text[: text.index("-- finished at")]
    with pytest.raises(EvidenceError, match="mdtest output incomplete: the closing '-- finished at"):
        parse_output("mdtest", cut)
    with pytest.raises(EvidenceError, match="cut short"):
        parse_output("mdtest", text[: text.index("Tree removal") + 40])


def test_it_reads_the_4x_layout_and_skips_the_time_table() -> None:
    # Derived from the 3.3 fixture in mdtest 4.0's layout (mdtest.c summarize_results_rank0): no
    # colon, "SUMMARY rate (in ops/sec)", a Directory rename row, then a "SUMMARY time" table.
    text = SJTU.read_text().replace("SUMMARY rate:", "SUMMARY rate (in ops/sec):").replace("        :", "         ")
    text = text.replace(
        "      Directory removal", "      Directory rename   100.000 90.000 95.000 5.000\n      Directory removal"
    )
    time_table = "\nSUMMARY time (in ms/op): (of 3 iterations)\n   File creation   0.040 0.035 0.037 0.002\n"
    text = text.replace("   -- finished", time_table + "   -- finished")
    ms = parse_output("mdtest", text).measurements
    assert one(ms, "ops_per_s", operation="file_creation", stat="mean").value == 24963.815  # not 0.037 ms/op
    assert one(ms, "ops_per_s", operation="directory_rename", stat="min").value == 90.0


def test_it_takes_the_per_iteration_columns_when_per_rank_ones_come_first() -> None:
    text = (
        SJTU.read_text()
        .replace("File creation             :", "File creation             :  1.000  2.000  3.000")
        .replace("   Operation   ", "   Operation per Rank: Max Min Mean per Iteration:")
    )
    ms = parse_output("mdtest", text).measurements
    assert one(ms, "ops_per_s", operation="file_creation", stat="max").value == 27976.199


def test_it_flags_nan_and_refuses_negative_rates() -> None:
    text = SJTU.read_text()
    nan = parse_output("mdtest", text.replace("24963.815", "-nan")).measurements
    assert "not a finite number" in one(nan, "ops_per_s", operation="file_creation", stat="mean").labels["invalid"]
    with pytest.raises(EvidenceError, match="File creation mean is -24963.815: a rate cannot be negative"):
        PARSERS["mdtest"](text.replace("24963.815", "-24963.815"))
    with pytest.raises(EvidenceError, match="not mdtest output"):
        PARSERS["mdtest"]("Segmentation fault\n")


# --- fs_metadata on captured outputs --------------------------------------------------------------


def test_it_passes_the_real_3_3_output_on_lustre_floors() -> None:
    ms, verdict = judge(SJTU.read_text(), LUSTRE)
    assert verdict.status == PASS, verdict.reason
    assert (
        verdict.reason
        == "file creation 24,964, stat 528,648, read 176,264, removal 20,943 ops/s on gpu03 (lustre floors)"
    )
    rate = one(ms, "file_creation_rate")
    assert (rate.value, rate.threshold, rate.ok) == (24963.815, ">= 500 ops/s", True)


def test_it_errors_when_mdtest_skipped_a_judged_phase() -> None:
    _, verdict = judge(DAOS.read_text(), LUSTRE)
    assert verdict.status == ERROR
    assert verdict.reason.startswith("mdtest reported no file stat rate on gpu03 (mdtest printed 0 for every statistic")
    # Run by the check itself (one task launched), the 10-task output is another test: error.
    [cmd] = FsMetadata().commands(FsMetadata.make_params({}), NodeContext(hostname="gpu03"))
    _, other = run_check(FsMetadata, None, None, [CommandOutput(cmd, DAOS.read_text(), "", 0)], NodeContext("gpu03"))
    assert (other.status, other.reason) == (ERROR, "mdtest ran 10 task(s), 1 were launched")


def test_it_errors_on_a_truncated_output_and_on_garbage() -> None:
    text = SJTU.read_text()
    _, cut = judge(text[: text.index("-- finished at")])
    assert cut.status == ERROR
    assert cut.reason == (
        "mdtest output incomplete: the closing '-- finished at ... --' line is missing "
        "(the run stopped early or was cut)"
    )
    _, junk = judge("\x00\x07 SUMMARY rate garbage \xff\n" * 20)
    assert junk.status == ERROR
    _, inf = judge(text.replace("176263.574", "inf"))
    assert inf.status == ERROR and inf.reason.startswith("impossible evidence")


def test_it_warns_without_a_floor() -> None:
    ms, verdict = judge(SJTU.read_text(), {"fs_class": "weka"})
    assert verdict.status == WARN
    assert verdict.reason.startswith(
        "file creation 24,964 ops/s on gpu03: not judged (no floor for fs_class 'weka'; set min_file_creation_ops)"
    )
    assert one(ms, "file_creation_rate").ok is None
    _, none = judge(SJTU.read_text(), {"fs_class": "none", "min_file_read_ops": 1000})
    assert none.status == WARN and "file read" not in none.reason  # the one floor set still judges


def test_a_site_floor_replaces_the_class_floor_and_judges_small_reads() -> None:
    _, verdict = judge(SJTU.read_text(), {"fs_class": "lustre", "min_file_creation_ops": 30000})
    assert verdict.status == FAIL
    assert verdict.reason == (
        "file creation 24,964 ops/s on gpu03, below the 30,000 ops/s floor (min_file_creation_ops)"
    )
    _, no_bytes = judge(SJTU.read_text(), {"min_small_read_mbps": 100})
    assert no_bytes.status == ERROR and "no small-file read bandwidth on gpu03" in no_bytes.reason


def test_it_takes_the_lowest_class_floor_for_any_filesystem() -> None:
    assert ANY_FLOORS == {"file_creation": 300.0, "file_stat": 2000.0, "file_read": 500.0, "file_removal": 1000.0}
    assert set(CLASS_FLOORS) == {"lustre", "gpfs", "weka", "nfs"}


def test_it_refuses_bad_params_and_thresholds() -> None:
    for path in ("scratch", "/lustre/../etc", "/a@/b", "/lustre/x\ny", "-rf"):
        with pytest.raises(ParamsError, match="param 'path'"):
            FsMetadata.make_params({"path": path})
    for name, value in (("files", 0), ("iterations", 1000), ("file_size", 64 * 1024 * 1024), ("tasks", 0)):
        with pytest.raises(ParamsError, match=f"param '{name}'"):
            FsMetadata.make_params({name: value})
    with pytest.raises(ParamsError, match="launcher_args"):
        FsMetadata.make_params({"launcher_args": "--mca 'unclosed"})
    with pytest.raises(ParamsError, match="fs_class"):
        FsMetadata.make_thresholds({"fs_class": "zfs"})
    with pytest.raises(ParamsError, match="min_file_stat_ops"):
        FsMetadata.make_thresholds({"min_file_stat_ops": -1})


def test_it_builds_the_mdtest_argv_without_a_shell_built_from_input() -> None:
    params = FsMetadata.make_params({"path": "/lustre/my scratch/", "files": 200, "file_size": 3901})
    [cmd] = FsMetadata().commands(params, NodeContext(hostname="gpu01; rm -rf /"))
    assert cmd.argv[:2] == ("sh", "-c") and '"$@"' in cmd.argv[2]
    assert cmd.argv[4] == "/lustre/my scratch/kiln-mdtest-gpu01__rm_-rf__"
    assert cmd.argv[5:] == (
        "mdtest", "-n", "200", "-i", "3", "-u", "-d", "/lustre/my scratch/kiln-mdtest-gpu01__rm_-rf__",
        "-w", "3901", "-e", "3901",
    )  # fmt: skip
    many = FsMetadata.make_params({"tasks": 8, "launcher_args": "--allow-run-as-root --bind-to none"})
    [cmd] = FsMetadata().commands(many, NodeContext(hostname="gpu01"))
    assert cmd.argv[5:11] == ("mpirun", "-np", "8", "--allow-run-as-root", "--bind-to", "none")


# --- fs_metadata on the simulator -----------------------------------------------------------------


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> SimPaths:
    return build_simulator(tmp_path_factory.mktemp("sim"))


def run_node(sim: SimPaths, root: Path, host: str, params=None, thresholds=None, **faults):
    state = root / "states" / host / "state"
    write_state(state, node=host, **faults)
    env = {**node_env(sim, state), "HOSTNAME": host}
    transport = LocalTransport(NodeTarget(hostname=host, transport="local", local_env=env))
    (root / "fs").mkdir(exist_ok=True)
    p = FsMetadata.make_params({**FAST, "path": str(root / "fs"), **(params or {})})
    outputs = [transport.run(c) for c in FsMetadata().commands(p, NodeContext(hostname=host))]
    measurements, verdict = run_check(FsMetadata, p, thresholds, outputs, NodeContext(hostname=host))
    return measurements, verdict, outputs


def test_it_passes_a_healthy_simulated_node_and_cleans_up(sim: SimPaths, tmp_path: Path) -> None:
    ms, verdict, outputs = run_node(sim, tmp_path, "gpu01", thresholds=LUSTRE)
    assert verdict.status == PASS, verdict.reason
    assert (
        verdict.reason
        == "file creation 8,000, stat 170,000, read 45,000, removal 11,000 ops/s on gpu01 (lustre floors)"
    )
    assert one(ms, "small_read_mbps").value == pytest.approx(45000 * 4096 / 1e6)
    assert f"'-d' '{tmp_path}/fs/kiln-mdtest-gpu01'" in outputs[0].stdout
    assert list((tmp_path / "fs").iterdir()) == []  # mdtest's directory is gone


def test_it_fails_a_slow_metadata_server_naming_operation_node_and_floor(sim: SimPaths, tmp_path: Path) -> None:
    _, verdict, _ = run_node(sim, tmp_path, "gpu03", thresholds=LUSTRE, mds_slow=20)
    assert verdict.status == FAIL
    assert verdict.reason == (
        "file creation 400 ops/s on gpu03, below the 500 ops/s floor for lustre; "
        "file removal 550 ops/s on gpu03, below the 1,000 ops/s floor for lustre"
    )


def test_it_judges_small_file_read_bandwidth_when_a_floor_is_set(sim: SimPaths, tmp_path: Path) -> None:
    thresholds = {**LUSTRE, "min_small_read_mbps": 50}
    _, verdict, _ = run_node(sim, tmp_path, "gpu04", thresholds=thresholds, mds_slow=10)
    assert verdict.status == FAIL
    assert verdict.reason.endswith("small-file read 18.4 MB/s on gpu04, below the 50 MB/s floor")


def test_it_sums_the_tasks_of_an_mpirun_launch(sim: SimPaths, tmp_path: Path) -> None:
    ms, verdict, outputs = run_node(sim, tmp_path, "gpu05", params={"tasks": 2, "launcher_args": "--oversubscribe"})
    assert verdict.status == PASS, (verdict.reason, outputs[0].stderr)
    assert one(ms, "tasks").value == 2
    assert one(ms, "file_creation_rate").value == 16000.0


def test_it_errors_on_garbage_a_hang_and_a_missing_mount(sim: SimPaths, tmp_path: Path) -> None:
    _, junk, _ = run_node(sim, tmp_path, "gpu06", mdtest_garbage=1)
    assert (junk.status, junk.reason) == (
        ERROR,
        "mdtest summary row cut short: 'File creation   :   \\x00\\x07##garbled## nan-ish ??'",
    )
    _, hung, _ = run_node(sim, tmp_path, "gpu07", params={"timeout_s": 2}, mds_hang=1)
    assert (hung.status, hung.reason) == (ERROR, "mdtest timed out after 2s")
    _, missing, _ = run_node(sim, tmp_path, "gpu08", params={"path": str(tmp_path / "not-mounted")})
    assert missing.status == ERROR
    assert missing.reason.startswith("mdtest exited 1: ERROR: unable to create directory")


def test_the_simulator_honours_mds_slow_when_run_directly(tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_state(state, node="gpu09", mds_slow=4)
    env = {**os.environ, "KILN_SIM_STATE": str(state)}
    argv = [sys.executable, str(TOOLS_DIR / "mdtest"), "-n", "10", "-i", "1", "-u", "-d", str(tmp_path / "md")]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, timeout=30)
    ms = parse_output("mdtest", run.stdout).measurements
    assert one(ms, "ops_per_s", operation="file_stat", stat="mean").value == 170000 / 4
    assert one(ms, "ops_per_s", operation="file_creation", stat="stddev").value == 0.0  # one iteration
    assert not (tmp_path / "md").exists()


def test_it_is_in_the_catalog() -> None:
    from checks.core.base import REGISTRY, by_slug, catalogued

    assert by_slug("fs-metadata") is REGISTRY["fs_metadata"] in catalogued()


def test_it_declares_history_outliers_and_metrics_without_a_chart() -> None:
    shown = FsMetadata.presentation
    assert shown.chart == ""
    assert [k.name for k in shown.key_metrics] == ["file_creation_rate", "file_stat_rate", "file_read_rate"]
    assert {(p.measurement, p.label_value) for p in shown.prometheus} == {
        (f"{op}_rate", op) for op in ("file_creation", "file_stat", "file_read", "file_removal")
    }
    rows = [{"name": "file_creation_rate", "value": v, "labels": {}} for v in (900.0, 400.0)]
    assert shown.outliers[0].read(rows) == 400.0


# --- fs_metadata_aggregate ------------------------------------------------------------------------


def run_group(sim: SimPaths, root: Path, nodes: list[str], params=None, thresholds=None, absent=(), **faults_by_node):
    for host in [h for h in [*nodes, "launcher"] if h not in absent]:
        write_state(root / "states" / host / "state", node=host, **faults_by_node.get(host, {}))
    env = node_env(sim, root / "states" / "launcher" / "state")
    launcher = LocalTransport(NodeTarget(hostname="launcher", transport="local", local_env=env))
    (root / "fs").mkdir(exist_ok=True)
    group = GroupContext(
        nodes=tuple(NodeContext(hostname=h) for h in nodes), launcher=NodeContext(hostname="launcher"), tag=root.name
    )
    p = FsMetadataAggregate.make_params({**FAST, "path": str(root / "fs"), **(params or {})})
    outputs = [launcher.run(c) for c in FsMetadataAggregate().group_commands(p, group)]
    ms, verdict = run_group_check(FsMetadataAggregate, p, thresholds, outputs, group)
    return ms, verdict, outputs


def test_the_aggregate_runs_one_mdtest_over_every_node(sim: SimPaths, tmp_path: Path) -> None:
    ms, verdict, outputs = run_group(sim, tmp_path, ["gpu01", "gpu02", "gpu03"], {"tasks": 2}, LUSTRE)
    assert verdict.status == PASS, (verdict.reason, outputs[-1].stderr)
    assert verdict.reason == (
        "file creation 48,000, stat 1,020,000, read 270,000, removal 66,000 ops/s over 3 nodes (lustre floors)"
    )
    assert (one(ms, "tasks").value, one(ms, "nodes").value, one(ms, "nodes").ok) == (6, 3, True)
    hostfile, run = outputs[0].command, outputs[1].command
    assert hostfile.stdin == "gpu01 slots=2\ngpu02 slots=2\ngpu03 slots=2\n"
    launch = ("mpirun", "--hostfile", hostfile.argv[4], "-np", "6", "--map-by", "ppr:2:node", "--allow-run-as-root")
    assert run.argv[6:14] == launch and run.argv[14] == "mdtest"
    assert list((tmp_path / "fs").iterdir()) == [] and not Path(hostfile.argv[4]).exists()


def test_the_aggregate_fails_below_its_own_floor_naming_no_node(sim: SimPaths, tmp_path: Path) -> None:
    thresholds = {"fs_class": "lustre", "min_aggregate_file_creation_ops": 10000}
    _, verdict, _ = run_group(sim, tmp_path, ["gpu04", "gpu05"], None, thresholds, gpu05={"mds_slow": 20})
    assert verdict.status == FAIL
    assert verdict.reason == (
        "file creation 800 ops/s over 2 nodes, below the 10,000 ops/s floor (min_aggregate_file_creation_ops)"
    )
    assert verdict.node_verdicts == {}


def test_the_aggregate_errors_when_mdtest_did_not_span_the_group() -> None:
    a1, a2 = NodeContext(hostname="a1"), NodeContext(hostname="a2")
    group = GroupContext(nodes=(a1, a2), launcher=a1)
    [_, run] = FsMetadataAggregate().group_commands(FsMetadataAggregate.make_params({}), group)
    text = SJTU.read_text().replace("with 1 total task(s) on 1 node(s)", "with 2 total task(s) on 1 node(s)")
    _, verdict = run_group_check(FsMetadataAggregate, None, None, [CommandOutput(run, text, "", 0)], group)
    assert (verdict.status, verdict.reason) == (ERROR, "mdtest ran on 1 node(s), expected 2")
    _, fewer = run_group_check(FsMetadataAggregate, None, None, [CommandOutput(run, SJTU.read_text(), "", 0)], group)
    assert (fewer.status, fewer.reason) == (ERROR, "mdtest ran 1 task(s), 2 were launched")
    with pytest.raises(ParamsError, match="cannot be passed to an MPI hostfile"):
        bad = GroupContext(nodes=(NodeContext(hostname="a1 slots=99"), a2), launcher=a1)
        FsMetadataAggregate().group_commands(FsMetadataAggregate.make_params({}), bad)


def test_the_aggregate_errors_for_a_node_mpirun_cannot_reach(sim: SimPaths, tmp_path: Path) -> None:
    _, verdict, _ = run_group(sim, tmp_path, ["gpu06", "gpu07"], absent=("gpu07",))
    assert verdict.status == ERROR
    assert verdict.reason == "mdtest exited 1: ORTE was unable to reliably start one or more daemons."
