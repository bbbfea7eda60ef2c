"""nccl_alltoall_multi: the real alltoall_perf outputs (tests/fixtures/nccl-alltoall), the group
verdicts with the node-count-scaled floor, and the simulator's alltoall_perf end to end through the
simulated mpirun, localised by halves (checks/core/localise.py) like all-reduce."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checks import __main__ as cli
from checks import get_check
from checks.core import localise
from checks.core.base import ERROR, FAIL, PASS, WARN, CommandOutput, GroupContext, NodeContext, run_group_check
from checks.core.profiles import resolve_thresholds
from checks.nccl.allreduce import PEAK_ENV, hostfile_path
from checks.nccl.alltoall import floor_scale
from checks.nccl.nccl_tests import infer_collective, parse_report, wrong_rows
from testbed.sim import SimPaths, build_simulator, node_env, write_state
from worker.ssh import LocalTransport, NodeTarget

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-alltoall"
RTX_2NODE = "alltoall_perf-2nodes-16ranks-rtx6000d-cx8-full-sweep.txt"
GB300_RACK = "alltoall_perf-gb300-16hosts-64ranks-1rack-oci.txt"
GB300_2RACKS = "alltoall_perf-gb300-32hosts-128ranks-2racks-oci.txt"
OLD_FORMAT = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"
OLD_FLOAT_ERROR = OLD_FORMAT / "alltoall_perf_8node_v100_error_column_float_issue78.txt"
RTX_HOSTS = ("R6KD-CX8aaS-GPU-11", "R6KD-CX8aaS-GPU-12")
KIND = "nccl_alltoall_multi"
FAST = {"min_bytes": "1M", "max_bytes": "1G", "peak_min_bytes": "512M", "iters": 5, "warmup_iters": 1}
SIM_HOSTS = [f"gpu0{i}" for i in range(1, 7)]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def group(*hosts: str, gpus: int | None = 8, tag: str = "run9-item4") -> GroupContext:
    nodes = tuple(NodeContext(hostname=h, expected_gpus=gpus) for h in hosts)
    return GroupContext(nodes=nodes, launcher=nodes[0], tag=tag)


def judge(stdout: str, thresholds: Any, hosts: tuple[str, ...] = RTX_HOSTS, exit_code: int = 0, binary: str = ""):
    """What the executor does with a group run's outputs: run_group_check over the check's commands."""
    check = get_check(KIND)
    params = check.make_params({"binary": binary} if binary else {})
    write, run = check.group_commands(params, group(*hosts))
    outputs = [CommandOutput(write, "", "", 0), CommandOutput(run, stdout, "", exit_code)]
    return run_group_check(check, None, thresholds, outputs, group(*hosts))


def h100() -> dict[str, Any]:
    return resolve_thresholds(KIND, "H100-SXM-8")


# --- the real outputs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "peak", "size", "ranks", "nodes", "avg"),
    [
        # busbw = algbw x 15/16 (16 ranks); the peak over sizes >= 1 GiB (41.19 at 512 MiB is below it).
        (RTX_2NODE, 41.14, 1 << 30, 16, 2, 21.1462),
        # The doc elided ranks 2-61 ("..."): 4 rank lines, the highest Rank 63, so 64 ranks; which
        # hosts ran the unlisted ones is unknown (nodes missing). busbw = algbw x 63/64 at 16 GiB.
        (GB300_RACK, 666.92, 16 << 30, 64, None, 370.718),
        # 32 hosts x 4 GB300 over two racks, ranks 2-125 elided: Rank 127 -> 128 ranks.
        (GB300_2RACKS, 47.67, 16 << 30, 128, None, 28.0844),
    ],
)
def test_it_parses_the_real_alltoall_outputs_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, peak: float, size: int, ranks: int,
    nodes: int | None, avg: float,
) -> None:  # fmt: skip
    assert cli.main(["parse", "nccl", str(FIXTURES / name)]) == 0
    out = json.loads(capsys.readouterr().out)
    values = {m["name"]: m["value"] for m in out["measurements"]}
    assert (values["busbw_peak"], values["size_at_peak"], values["busbw_avg_reported"]) == (peak, size, avg)
    assert (values["ranks"], values["nodes"], values["wrong"], values["collective"]) == (ranks, nodes, 0, "alltoall")
    assert out["warnings"] == []


def test_the_busbw_of_the_fixtures_is_algbw_times_n_minus_1_over_n() -> None:
    """nccl-tests' alltoall factor (doc/PERFORMANCE.md): the parser reads busbw as printed, and the
    printed numbers hold to it (16 ranks: 15/16; the GB300 run's 64 ranks: 63/64)."""
    for name, n in ((RTX_2NODE, 16), (GB300_RACK, 64), (GB300_2RACKS, 128)):
        report = parse_report(fixture(name))
        assert report.rank_count == n
        for row in report.rows:
            p = row.placements["out-of-place"]
            assert p.busbw == pytest.approx(p.algbw * (n - 1) / n, abs=0.011), (name, row.size)


def test_it_names_an_old_format_alltoall_from_its_blank_redop() -> None:
    """Before 2.13 alltoall prints an empty redop column (src/alltoall.cu TimeTest(..., "", -1)) and
    no "Collective test" lines: its rows are one token short of the header, and the blank names it."""
    lines = [line for line in fixture(RTX_2NODE).splitlines() if "Collective test" not in line]
    old = "\n".join(lines).replace("    none      -1", "          ").replace("   redop    root  ", "   redop  ")
    report = parse_report(old)
    assert len(report.rows) == 24 and report.unreadable == []
    first, last = report.rows[0], report.rows[-1]
    assert (first.redop, first.root, last.placements["out-of-place"].busbw) == ("", None, 41.03)
    assert (report.named, infer_collective(report)) == ("", "alltoall")


def test_it_counts_the_ranks_of_a_run_whose_rank_lines_were_elided_by_their_numbers() -> None:
    report = parse_report(fixture(GB300_2RACKS))
    assert ([r.rank for r in report.ranks], report.hosts) == ([0, 1, 126, 127], ["GPU-5705", "GPU-1631"])
    assert (report.rank_count, report.ranks_unlisted) == (128, 124)


def test_it_reads_an_old_alltoall_whose_error_column_is_a_float_and_trusts_its_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before 2.13 `error` is the largest deviation ("%5.0le"), not a count; alltoall's in-place 1e+00
    is not a validation (later versions print N/A there) and the tool's summary says 0 out of bounds."""
    report = parse_report(OLD_FLOAT_ERROR.read_text())
    assert report.unreadable == [] and len(report.rows) == 2
    out, inplace = report.rows[0].placements["out-of-place"], report.rows[0].placements["in-place"]
    assert (out.wrong, out.delta, inplace.wrong, inplace.delta, report.rows[0].redop) == (None, 0.0, None, 1.0, "")
    assert cli.main(["parse", "nccl", str(OLD_FLOAT_ERROR)]) == 0
    found = {m["name"]: m for m in json.loads(capsys.readouterr().out)["measurements"]}
    assert (found["wrong"]["value"], found["error_max"]["value"]) == (0, 1)
    assert found["busbw_avg_reported"]["value"] == 0.507636


def test_an_elided_run_over_32_hosts_cannot_say_which_nodes_ran() -> None:
    hosts = tuple(f"GPU-{i}" for i in range(32))
    check = get_check(KIND)
    params = check.make_params({})
    write, run = check.group_commands(params, group(*hosts, gpus=4))
    outputs = [CommandOutput(write, "", "", 0), CommandOutput(run, fixture(GB300_2RACKS), "", 0)]
    measurements, verdict = run_group_check(check, None, h100(), outputs, group(*hosts, gpus=4))
    assert verdict.status == ERROR
    assert "124 of 128 ranks have no '# Rank' line" in verdict.reason
    ranks = next(m for m in measurements if m.name == "ranks")
    assert (ranks.value, ranks.ok) == (128, True)  # 32 hosts x 4 GPUs: the count itself is right


def test_a_starred_old_error_counts_as_a_wrong_result() -> None:
    # Some pre-2.13 versions star a result past the tolerance ("%5.0le%s", error ? "*" : "").
    text = (
        OLD_FLOAT_ERROR.read_text()
        .replace("0.51  0e+00   519562", "0.51  3e+00*  519562")
        .replace("Out of bounds values : 0 OK", "Out of bounds values : 1 FAILED")
    )
    report = parse_report(text)
    assert report.rows[0].placements["out-of-place"].wrong == 1
    assert wrong_rows(report) == ["256 MiB out-of-place: 1"]


# --- group verdicts on the real output ----------------------------------------------------------


def test_it_scales_the_floor_with_the_node_count() -> None:
    assert [floor_scale(n) for n in (1, 2, 4, 16)] == [1.0, 2.0, 4 / 3, 16 / 15]


def test_it_passes_the_real_2node_run_on_a_floor_it_meets() -> None:
    measurements, verdict = judge(fixture(RTX_2NODE), {"min_gpu_net_gbps": 20})
    assert verdict.status == PASS, verdict.reason
    assert verdict.findings[-1].reason == (
        "busbw 41.1 GB/s at 1 GiB (floor 40 GB/s: 20 GB/s per GPU x 2/1 for 2 nodes) "
        "across R6KD-CX8aaS-GPU-11, R6KD-CX8aaS-GPU-12"
    )
    busbw = next(m for m in measurements if m.name == "busbw_peak")
    assert (busbw.threshold, busbw.ok) == (">= 40", True)
    assert verdict.node_verdicts == {}


def test_it_fails_the_real_2node_run_on_the_h100_floor() -> None:
    _, verdict = judge(fixture(RTX_2NODE), h100())
    assert verdict.status == FAIL
    assert verdict.reason == (
        "busbw 41.1 GB/s at 1 GiB below the 72 GB/s floor (36 GB/s per GPU x 2/1 for 2 nodes) "
        "across R6KD-CX8aaS-GPU-11, R6KD-CX8aaS-GPU-12"
    )


def test_it_warns_not_judged_without_a_floor() -> None:
    _, verdict = judge(fixture(RTX_2NODE), resolve_thresholds(KIND, None))
    assert verdict.status == WARN
    assert "not judged (no min_gpu_net_gbps floor set)" in verdict.reason


def test_it_fails_wrong_results() -> None:
    stdout = (
        fixture(RTX_2NODE)
        .replace(
            "  1073741824      16777216     float    none      -1  24470.9   43.88   41.14       0 ",
            "  1073741824      16777216     float    none      -1  24470.9   43.88   41.14       3 ",
        )
        .replace("# Out of bounds values : 0 OK", "# Out of bounds values : 1 FAILED")
    )
    _, verdict = judge(stdout, h100(), exit_code=1)
    assert verdict.status == FAIL
    assert verdict.reason.startswith(
        "#wrong = 3 (results differ from the reference; 1 wrong, first at 1 GiB out-of-place: 3)"
    )


def test_it_errors_on_the_output_of_another_collective() -> None:
    """all_reduce_perf's output (its table and its program) run where alltoall_perf was expected."""
    allreduce = (FIXTURES.parent / "nccl-tests" / "all_reduce_perf_2node_16xH100_gcp_a3mega.txt").read_text()
    _, verdict = judge(allreduce, h100(), hosts=("ztan-mig-235z", "ztan-mig-gq73"), binary="all_reduce_perf")
    assert verdict.status == ERROR
    assert verdict.findings[0].reason == "the output is from all_reduce_perf, not alltoall_perf"
    # The program's argv says alltoall, the table's numbers (busbw = 2(n-1)/n x algbw) say all_reduce.
    _, verdict = judge(allreduce, h100(), hosts=("ztan-mig-235z", "ztan-mig-gq73"))
    assert verdict.status == ERROR and "the output is from all_reduce_perf, not alltoall_perf" in verdict.reason


def test_it_errors_when_the_run_did_not_span_every_node() -> None:
    _, verdict = judge(fixture(RTX_2NODE), h100(), hosts=(*RTX_HOSTS, "gpu03"))
    assert verdict.status == ERROR
    assert verdict.reason.startswith("ran on 2 node(s) (R6KD-CX8aaS-GPU-11,R6KD-CX8aaS-GPU-12), expected 3")


def test_it_errors_on_a_truncated_run_and_on_a_crash() -> None:
    text = fixture(RTX_2NODE)
    _, verdict = judge(text[: text.index("# Out of bounds")], h100())
    assert (verdict.status, verdict.reason.split(":")[0]) == (ERROR, "output incomplete")
    _, verdict = judge(text + "gpu11: Test NCCL failure common.cu:1005 'unhandled system error'\n", h100(), exit_code=3)
    assert verdict.status == ERROR
    assert verdict.reason == "alltoall_perf exited 3: Test NCCL failure common.cu:1005 'unhandled system error'"


def test_it_runs_alltoall_perf_from_mpirun_and_srun() -> None:
    check = get_check(KIND)
    write, run = check.group_commands(check.make_params({}), group("gpu01", "gpu02"))
    assert write.stdin == "gpu01 slots=8\ngpu02 slots=8\n"
    assert run.argv[:9] == ("mpirun", "--hostfile", hostfile_path("run9-item4"), "-np", "16", "--map-by",
                            "ppr:8:node", "--allow-run-as-root", "alltoall_perf")  # fmt: skip
    assert (run.label, run.env, check.pairwise) == ("alltoall_perf", {PEAK_ENV: str(1 << 30)}, True)
    [srun] = check.group_commands(check.make_params({"launcher": "srun", "launcher_args": ""}), group("a", "b"))
    assert srun.argv[:7] == ("srun", "-N", "2", "--ntasks-per-node=8", "-w", "a,b", "alltoall_perf")


def test_it_sets_a_per_gpu_network_floor_per_profile() -> None:
    floors = {p: resolve_thresholds(KIND, p)["min_gpu_net_gbps"] for p in ("H100-SXM-8", "H200-SXM-8", "A100-SXM-8")}
    assert floors == {"H100-SXM-8": 36.0, "H200-SXM-8": 36.0, "A100-SXM-8": 18.0}
    assert resolve_thresholds(KIND, None)["min_gpu_net_gbps"] is None


# --- on the simulator ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> SimPaths:
    return build_simulator(tmp_path_factory.mktemp("sim"))


class Cluster:
    """Simulated nodes whose states sit side by side (states/<host>/state), as the tools expect."""

    def __init__(self, sim: SimPaths, root: Path) -> None:
        self.sim, self.root = sim, root
        for host in SIM_HOSTS:
            self.node(host)

    def node(self, host: str, **faults: Any) -> None:
        write_state(self.root / host / "state", node=host, **faults)

    def run(self, hosts: list[str], tag: str) -> tuple[list[CommandOutput], Any]:
        """The launcher (first host) runs the group's commands; judged as the executor does."""
        check = get_check(KIND)
        params = check.make_params(FAST)
        ctx = group(*hosts, tag=f"{tag}-{self.root.parent.name}")
        env = node_env(self.sim, self.root / hosts[0] / "state")
        transport = LocalTransport(NodeTarget(hostname=hosts[0], transport="local", local_env=env))
        try:
            outputs = [transport.run(c) for c in check.group_commands(params, ctx)]
            return outputs, run_group_check(check, params, h100(), outputs, ctx)[1]
        finally:
            Path(hostfile_path(ctx.tag)).unlink(missing_ok=True)


@pytest.fixture
def cluster(sim: SimPaths, tmp_path: Path) -> Cluster:
    return Cluster(sim, tmp_path / "states")


def test_the_simulator_prints_a_real_alltoall_perf_output(cluster: Cluster) -> None:
    outputs, verdict = cluster.run(["gpu01", "gpu02"], "healthy")
    text = outputs[1].stdout
    assert text.startswith("# nccl-tests version 2.18.3") and "# Collective test starting: alltoall_perf" in text
    report = parse_report(text)
    assert (len(report.ranks), report.hosts, report.named) == (16, ["gpu01", "gpu02"], "alltoall")
    row = report.rows[-1]
    assert (row.size, row.count * 4 * 16, row.redop, row.root) == (1 << 30, 1 << 30, "none", -1)
    assert row.placements["in-place"].wrong is None  # N/A, as nccl-tests 2.18 prints for alltoall
    # 2 healthy nodes: 47 GB/s per GPU (400G at 94%) x 15/8 = ~88 GB/s, over the 72 GB/s floor.
    assert verdict.status == PASS, verdict.reason
    assert 85 <= row.best_busbw()[0] <= 89
    assert "(floor 72 GB/s: 36 GB/s per GPU x 2/1 for 2 nodes) across gpu01, gpu02" in verdict.findings[-1].reason


def test_the_simulator_slows_the_group_to_its_slowest_nic(cluster: Cluster) -> None:
    cluster.node("gpu02", ib_port_rate="mlx5_2:200")
    _, verdict = cluster.run(["gpu01", "gpu02", "gpu03"], "rate")
    # 3 nodes (floor 36 x 3/2 = 54): one GPU's NIC at 200G sets the pace, ~23.5 x 23/16 = ~34.
    assert verdict.status == FAIL
    assert "below the 54 GB/s floor (36 GB/s per GPU x 3/2 for 3 nodes) across gpu01, gpu02, gpu03" in verdict.reason
    cluster.node("gpu02", ib_port_down="mlx5_5")
    _, verdict = cluster.run(["gpu01", "gpu02"], "down")
    assert verdict.status == FAIL


def test_the_simulator_runs_alltoall_on_one_node_at_nvlink_speed(cluster: Cluster) -> None:
    env = node_env(cluster.sim, cluster.root / "gpu01" / "state")
    target = NodeTarget(hostname="gpu01", transport="local", local_env=env)
    check = get_check(KIND)
    [_, run] = check.group_commands(check.make_params(FAST), group("gpu01", "gpu02"))
    single = type(run)(argv=("alltoall_perf", "-b", "1G", "-e", "1G", "-g", "8"), timeout=60, label="alltoall_perf")
    report = parse_report(LocalTransport(target).run(single).stdout)
    assert 360 <= (report.rows[0].best_busbw()[0] or 0) <= 372


def test_it_localises_the_slow_node_by_halves(cluster: Cluster) -> None:
    """As all-reduce (tests/checks/test_nccl_sim.py): the planner fed with the simulator's real runs
    of halves and pairs; the scaled floor fails the slow node's pairs as it fails the whole group."""
    cluster.node("gpu04", net_slow_factor=0.5)
    _, root = cluster.run(SIM_HOSTS, "all")
    assert root.status == FAIL
    assert "below the 43.2 GB/s floor (36 GB/s per GPU x 6/5 for 6 nodes)" in root.reason
    state = localise.start(SIM_HOSTS, root)
    while runs := localise.plan(state, capacity=8):
        done = []
        for index, run in enumerate(runs):
            outputs, verdict = cluster.run(list(run.nodes), f"r{state.rounds + 1}-{index}")
            assert outputs[0].command.stdin == "".join(f"{h} slots=8\n" for h in run.nodes)
            done.append((run, verdict))
        localise.record(state, done)
    localised = localise.conclude(state)
    assert localised.status == FAIL
    assert {h for h, v in localised.node_verdicts.items() if v.status != PASS} == {"gpu04"}
    assert "for 2 nodes" in localised.node_verdicts["gpu04"].reason
    assert localised.reason.startswith("localised to gpu04 by halves")
