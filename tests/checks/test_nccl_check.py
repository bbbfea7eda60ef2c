"""nccl_allreduce / nccl_allreduce_multi: commands and verdicts (no simulator; localisation by halves:
tests/checks/test_localise.py, and on the simulator tests/checks/test_nccl_sim.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import checks.nccl.allreduce  # noqa: F401  (registers the checks until checks/__init__ imports the module)
from checks import __main__ as cli
from checks import get_check, run_check
from checks.core.base import ERROR, FAIL, PASS, WARN, Command, CommandOutput, GroupContext, NodeContext, ParamsError
from checks.core.profiles import resolve_params, resolve_thresholds
from checks.nccl.allreduce import PEAK_ENV, WRITE_HOSTFILE_SCRIPT, hostfile_path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"
A100_1NODE = "all_reduce_perf_8xA100-80GB_single_node_gcm.txt"
A100_OLD = "all_reduce_perf_8xA100-40GB_old_format_nocheck.txt"
H100_2NODE = "all_reduce_perf_2node_16xH100_gcp_a3mega.txt"
A100_2NODE = "all_reduce_perf_2node_16xA100-80GB_pairwise_gcm.txt"
NODE = NodeContext(hostname="gpu001", expected_gpus=8)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def single(stdout: str, *, exit_code: int = 0, binary: str = "all_reduce_perf", peak: str | None = None):
    env = {PEAK_ENV: peak} if peak else {}
    cmd = Command(argv=(binary, "-b", "8", "-e", "8G"), timeout=300, env=env, label="all_reduce_perf")
    return [CommandOutput(command=cmd, stdout=stdout, stderr="", exit_code=exit_code)]


def judge(stdout: str, profile: str | None = "H100-SXM-8", node: NodeContext = NODE, **kwargs):
    thresholds = resolve_thresholds("nccl_allreduce", profile)
    return run_check(get_check("nccl_allreduce"), None, thresholds, single(stdout, **kwargs), node)


def with_wrong(stdout: str) -> str:
    return stdout.replace(
        "   8109.1  132.41  231.72      0   8109.7  132.40  231.70      0",
        "   8109.1  132.41  231.72      5   8109.7  132.40  231.70      7",
    ).replace("# Out of bounds values : 0 OK", "# Out of bounds values : 12 FAILED")


# --- single node: commands and params ---------------------------------------------------------


def test_it_builds_the_all_reduce_perf_command() -> None:
    check = get_check("nccl_allreduce")
    [cmd] = check.commands(check.make_params({}), NodeContext(hostname="n", expected_gpus=4))
    assert cmd.argv == (
        "all_reduce_perf",
        "-b",
        "8",
        "-e",
        "8G",
        "-f",
        "2",
        "-g",
        "4",
        "-c",
        "1",
        "-n",
        "20",
        "-w",
        "5",
    )
    assert (cmd.timeout, cmd.label, cmd.env) == (300, "all_reduce_perf", {PEAK_ENV: str(1 << 30)})


def test_it_uses_the_gpus_param_then_eight() -> None:
    check = get_check("nccl_allreduce")
    params = check.make_params({"gpus": 2, "min_bytes": "1M", "max_bytes": "1G", "binary": "/opt/nccl/all_reduce_perf"})
    [cmd] = check.commands(params, NODE)
    assert cmd.argv[:9] == ("/opt/nccl/all_reduce_perf", "-b", "1M", "-e", "1G", "-f", "2", "-g", "2")
    [cmd] = check.commands(check.make_params({}), NodeContext(hostname="n"))
    assert cmd.argv[cmd.argv.index("-g") + 1] == "8"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_bytes": "8X"}, "param 'max_bytes': not a size"),
        ({"min_bytes": "2G", "max_bytes": "1G"}, "param 'min_bytes' (2G) is above 'max_bytes' (1G)"),
        ({"step_factor": 1}, "param 'step_factor': must be >= 2"),
        ({"gpus": 0}, "param 'gpus': must be >= 1"),
    ],
)
def test_it_rejects_bad_params(values, message) -> None:
    with pytest.raises(ParamsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        get_check("nccl_allreduce").make_params(values)


def test_it_sets_profile_floors_and_none_for_generic() -> None:
    assert resolve_thresholds("nccl_allreduce", "H100-SXM-8")["min_busbw_gbps"] == 460.0
    assert resolve_thresholds("nccl_allreduce", "A100-SXM-8")["min_busbw_gbps"] == 228.0
    assert resolve_thresholds("nccl_allreduce", "generic") == {"min_busbw_gbps": None, "max_wrong": 0}
    assert resolve_thresholds("nccl_allreduce_multi", "H100-SXM-8")["min_busbw_gbps"] == 300.0
    assert resolve_params("nccl_allreduce", "H100-SXM-8")["max_bytes"] == "8G"


# --- single node: verdicts ----------------------------------------------------------------------


def test_it_passes_the_a100_run_on_the_a100_floor() -> None:
    measurements, verdict = judge(fixture(A100_1NODE), "A100-SXM-8")
    assert (verdict.status, verdict.reason) == (PASS, "busbw 231.7 GB/s at 1 GiB (floor 228), #wrong 0")
    assert verdict.findings[-1].reason == "busbw 231.7 GB/s at 1 GiB (floor 228 GB/s)"
    peak = next(m for m in measurements if m.name == "busbw_peak")
    assert (peak.value, peak.threshold, peak.ok) == (231.72, ">= 228", True)


def test_it_fails_the_a100_run_on_the_h100_floor_naming_busbw() -> None:
    _, verdict = judge(fixture(A100_1NODE), "H100-SXM-8")
    assert (verdict.status, verdict.reason) == (FAIL, "busbw 231.7 GB/s at 1 GiB below the 460 GB/s floor")


def test_it_fails_on_wrong_results_even_with_exit_1() -> None:
    measurements, verdict = judge(with_wrong(fixture(A100_1NODE)), "A100-SXM-8", exit_code=1)
    assert (verdict.status, verdict.reason) == (
        FAIL,
        "#wrong = 12 (results differ from the reference; 2 wrong, first at 1 GiB out-of-place: 5)",
    )
    wrong = next(m for m in measurements if m.name == "wrong")
    assert (wrong.value, wrong.threshold, wrong.ok) == (12, "<= 0", False)


def test_it_errors_on_exit_1_without_a_failed_footer() -> None:
    cut = fixture(A100_1NODE).split("# Out of bounds")[0]
    measurements, verdict = judge(cut, exit_code=1)
    assert verdict.status == ERROR
    assert verdict.reason.startswith("all_reduce_perf exited 1:")
    assert measurements == []


def test_it_errors_on_other_exit_codes_before_parsing() -> None:
    _, verdict = judge(fixture(A100_1NODE), exit_code=2)
    assert (verdict.status, verdict.reason) == (ERROR, "all_reduce_perf exited 2: no stderr")


def test_it_errors_when_results_were_not_validated() -> None:
    _, verdict = judge(fixture(A100_OLD), "A100-SXM-8")
    assert verdict.status == ERROR
    assert verdict.reason == "results not validated: #wrong is N/A: results were not validated (run with -c 1)"


def test_it_errors_when_no_size_reaches_the_peak_floor() -> None:
    _, verdict = judge(fixture(A100_1NODE), "A100-SXM-8", peak=str(2 << 30))
    assert verdict.status == ERROR
    assert verdict.reason == "largest size 1 GiB is below peak_min_bytes (2 GiB): cannot judge peak bandwidth"


def test_it_warns_not_judged_on_generic_with_evidence_but_no_floor() -> None:
    measurements, verdict = judge(fixture(A100_1NODE), "generic")
    assert verdict.status == WARN
    assert verdict.reason == "busbw 231.7 GB/s at 1 GiB: not judged (no min_busbw_gbps floor set)"
    busbw = next(m for m in measurements if m.name == "busbw_peak")
    assert (busbw.value, busbw.ok) == (231.72, None)


def test_it_errors_when_fewer_gpus_ran_than_the_node_has() -> None:
    _, verdict = judge(fixture(A100_1NODE), "A100-SXM-8", node=NodeContext(hostname="n", expected_gpus=16))
    assert (verdict.status, verdict.reason) == (ERROR, "ran on 8 GPUs, the node has 16: not every GPU measured")


def test_it_errors_on_the_output_of_another_collective() -> None:
    _, verdict = judge(fixture(A100_1NODE), "A100-SXM-8", binary="/opt/all_gather_perf")
    assert (verdict.status, verdict.reason) == (ERROR, "the output is from all_gather_perf, not all_reduce_perf")


def test_it_errors_on_the_mpirun_slots_failure() -> None:
    measurements, verdict = judge(fixture("mpirun_not_enough_slots_failure_gcm.txt"), exit_code=0)
    assert verdict.status == ERROR
    assert "There are not enough slots available in the system to satisfy the 16 slots" in verdict.reason
    assert measurements == []


def test_it_describes_a_failed_launch_with_the_open_mpi_banner() -> None:
    cmd = Command(argv=("mpirun", "all_reduce_perf"), timeout=60, label="all_reduce_perf")
    out = CommandOutput(cmd, "", fixture("mpirun_not_enough_slots_failure_gcm.txt"), 1)
    _, verdict = run_check(get_check("nccl_allreduce"), None, None, [out], NODE)
    assert verdict.reason.startswith(
        "all_reduce_perf exited 1: mpirun: There are not enough slots available in the system to satisfy the 16"
    )
    check = get_check("nccl_allreduce")
    assert check.describe_failure(CommandOutput(cmd, "gpu01: Test CUDA failure common.cu:892 'x'\n", "", 1)) == (
        "Test CUDA failure common.cu:892 'x'"
    )


def test_it_exposes_busbw_by_size_as_a_series() -> None:
    [series] = get_check("nccl_allreduce").series(single(fixture(H100_2NODE)))
    assert (series.name, series.unit, series.x_unit, series.labels) == (
        "busbw",
        "GB/s",
        "B",
        {"collective": "all_reduce"},
    )
    assert series.x[0] == 8 and series.x[-1] == 8 << 30 and len(series.x) == 31
    assert series.y[-1] == 338.82 and series.y[-3] == 318.52  # best of out-of-place / in-place


def test_it_judges_a_captured_file_from_the_command_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "out.txt"
    path.write_text(fixture(A100_1NODE))
    assert cli.main(["parse", "nccl_allreduce", str(path), "--profile", "A100-SXM-8"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["verdict"]["status"] == PASS
    assert {m["name"] for m in result["measurements"]} >= {"busbw_peak", "algbw_peak", "wrong", "ranks"}


# --- multi node: commands -----------------------------------------------------------------------


def group(*hosts: str, gpus: int | None = 8, tag: str = "run7-item3") -> GroupContext:
    nodes = tuple(NodeContext(hostname=h, expected_gpus=gpus) for h in hosts)
    return GroupContext(nodes=nodes, launcher=nodes[0], tag=tag)


def test_it_writes_a_hostfile_then_runs_mpirun_one_gpu_per_rank() -> None:
    check = get_check("nccl_allreduce_multi")
    write, run = check.group_commands(check.make_params({}), group("gpu01", "gpu02"))
    path = "/tmp/kiln-nccl-run7-item3.hostfile"
    assert write.argv == ("sh", "-c", WRITE_HOSTFILE_SCRIPT, "sh", path)
    assert write.stdin == "gpu01 slots=8\ngpu02 slots=8\n"
    assert run.argv == (
        "mpirun", "--hostfile", path, "-np", "16", "--map-by", "ppr:8:node", "--allow-run-as-root",
        "all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "1", "-c", "1", "-n", "20", "-w", "5",
    )  # fmt: skip
    assert (run.timeout, run.label, run.env) == (600, "all_reduce_perf", {PEAK_ENV: str(1 << 30)})


def test_it_runs_srun_with_a_node_list() -> None:
    check = get_check("nccl_allreduce_multi")
    params = check.make_params({"launcher": "srun", "launcher_args": "--mpi=pmix", "gpus": 4})
    [run] = check.group_commands(params, group("a1", "a2", "a3", gpus=None))
    assert run.argv[:7] == ("srun", "-N", "3", "--ntasks-per-node=4", "-w", "a1,a2,a3", "--mpi=pmix")
    assert run.argv[7:11] == ("all_reduce_perf", "-b", "8", "-e")


def test_it_keeps_odd_hostnames_and_tags_inert() -> None:
    check = get_check("nccl_allreduce_multi")
    odd = "gpu$(touch${IFS}pwned);'01\"`x`"
    write, run = check.group_commands(check.make_params({}), group(odd, "gpu02", tag="run 7; rm -rf /"))
    assert write.argv[-1] == hostfile_path("run 7; rm -rf /") == "/tmp/kiln-nccl-run_7__rm_-rf__.hostfile"
    assert write.stdin.splitlines()[0] == f"{odd} slots=8"
    assert run.argv[2] == write.argv[-1]
    for bad in ("gpu 01", "gpu01\nevil", "-oops", "a,b", "x#y", ""):
        with pytest.raises(ParamsError, match="cannot be passed to an MPI hostfile"):
            check.group_commands(check.make_params({}), group(bad, "gpu02"))


def test_it_rejects_an_unknown_launcher() -> None:
    with pytest.raises(ParamsError, match="param 'launcher'"):
        get_check("nccl_allreduce_multi").make_params({"launcher": "pdsh"})


# --- multi node: verdicts -----------------------------------------------------------------------


def multi_outputs(stdout: str, *, exit_code: int = 0) -> list[CommandOutput]:
    check = get_check("nccl_allreduce_multi")
    write, run = check.group_commands(check.make_params({}), group("ztan-mig-235z", "ztan-mig-gq73"))
    return [CommandOutput(write, "", "", 0), CommandOutput(run, stdout, "", exit_code)]


def judge_group(stdout: str, profile: str, hosts=("ztan-mig-235z", "ztan-mig-gq73")):
    check = get_check("nccl_allreduce_multi")
    thresholds = check.make_thresholds(resolve_thresholds("nccl_allreduce_multi", profile))
    measurements = check.parse(multi_outputs(stdout))
    return measurements, check.evaluate_group(measurements, thresholds, group(*hosts))


def test_it_passes_the_2node_h100_run_naming_the_group() -> None:
    _, verdict = judge_group(fixture(H100_2NODE), "H100-SXM-8")
    assert verdict.status == PASS
    assert verdict.findings[-1].reason == (
        "busbw 338.8 GB/s at 8 GiB (floor 300 GB/s) across ztan-mig-235z, ztan-mig-gq73"
    )
    assert verdict.node_verdicts == {}


def test_it_fails_a_slow_group_without_blaming_a_node() -> None:
    check = get_check("nccl_allreduce_multi")
    measurements = check.parse(multi_outputs(fixture(H100_2NODE)))
    verdict = check.evaluate_group(measurements, check.make_thresholds({"min_busbw_gbps": 350}),
                                   group("ztan-mig-235z", "ztan-mig-gq73"))  # fmt: skip
    assert (verdict.status, verdict.node_verdicts) == (FAIL, {})
    assert verdict.reason == "busbw 338.8 GB/s at 8 GiB below the 350 GB/s floor across ztan-mig-235z, ztan-mig-gq73"


def test_it_errors_when_the_run_did_not_span_every_node() -> None:
    _, verdict = judge_group(fixture(H100_2NODE), "H100-SXM-8", hosts=("ztan-mig-235z", "ztan-mig-gq73", "gpu03"))
    assert verdict.status == ERROR
    assert verdict.reason.startswith(
        "ran on 2 node(s) (ztan-mig-235z,ztan-mig-gq73), expected 3 across ztan-mig-235z, ztan-mig-gq73, gpu03"
    )


def test_it_errors_when_writing_the_hostfile_failed() -> None:
    outs = multi_outputs(fixture(H100_2NODE))
    outs[0] = CommandOutput(outs[0].command, "", "sh: 1: cannot create /tmp/x: Permission denied\n", 2)
    _, verdict = run_check(get_check("nccl_allreduce_multi"), None, None, outs, NODE)
    assert verdict.status == ERROR
    assert verdict.reason == "hostfile exited 2: sh: 1: cannot create /tmp/x: Permission denied"


def test_it_passes_the_a100_pairwise_fixture_on_the_a100_floor() -> None:
    _, verdict = judge_group(fixture(A100_2NODE), "A100-SXM-8", hosts=("{host1}", "{host2}"))
    assert verdict.status == PASS


def test_it_judges_its_own_floor_when_the_tool_failed_its_nccl_tests_min_bw() -> None:
    # NCCL_TESTS_MIN_BW on the node makes all_reduce_perf exit 1 with "Avg ... FAILED": complete
    # evidence, judged against Kiln's thresholds (peak, not the all-sizes average).
    stdout = fixture(A100_1NODE).replace("# Avg bus bandwidth    : 210.99", "# Avg bus bandwidth    : 210.99 FAILED")
    _, verdict = judge(stdout, "A100-SXM-8", exit_code=1)
    assert verdict.status == PASS
