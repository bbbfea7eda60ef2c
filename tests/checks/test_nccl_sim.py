"""NCCL checks end to end on simulated nodes: the real commands, run through LocalTransport against
testbed/sim/tools/{all_reduce_perf,mpirun,srun}, judged by run_check / evaluate_group / localise.

Fast-run params (sizes 1 MiB .. 1 GiB, peak judged from 512 MiB) keep every sweep short."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import checks.nccl.allreduce  # noqa: F401  (registers the checks until checks/__init__ imports the module)
from checks import get_check, run_check
from checks.core import localise
from checks.core.base import ERROR, FAIL, PASS, GroupContext, NodeContext
from checks.core.profiles import resolve_thresholds
from checks.nccl.allreduce import hostfile_path
from testbed.sim import SimPaths, build_simulator, node_env, write_state
from worker.ssh import LocalTransport, NodeTarget

FAST = {"min_bytes": "1M", "max_bytes": "1G", "peak_min_bytes": "512M", "iters": 5, "warmup_iters": 1}
HOSTS = [f"gpu0{i}" for i in range(1, 7)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> SimPaths:
    return build_simulator(tmp_path_factory.mktemp("sim"))


class Cluster:
    """Simulated nodes whose states sit side by side (states/<host>/state), as the tools expect."""

    def __init__(self, sim: SimPaths, root: Path) -> None:
        self.sim, self.root = sim, root

    def node(self, host: str, **faults: Any) -> None:
        write_state(self.root / host / "state", node=host, **faults)

    def transport(self, host: str) -> LocalTransport:
        env = node_env(self.sim, self.root / host / "state")
        return LocalTransport(NodeTarget(hostname=host, transport="local", local_env=env))


@pytest.fixture
def cluster(sim: SimPaths, tmp_path: Path) -> Cluster:
    c = Cluster(sim, tmp_path / "states")
    for host in HOSTS:
        c.node(host)
    return c


def run_single(cluster: Cluster, host: str, profile: str = "H100-SXM-8", **params: Any):
    check = get_check("nccl_allreduce")
    p = check.make_params({**FAST, **params})
    node = NodeContext(hostname=host, expected_gpus=8)
    transport = cluster.transport(host)
    outputs = [transport.run(c) for c in check.commands(p, node)]
    measurements, verdict = run_check(check, p, resolve_thresholds("nccl_allreduce", profile), outputs, node)
    return measurements, verdict, check.series(outputs)


def run_group(cluster: Cluster, hosts: list[str], tag: str, profile: str = "H100-SXM-8", **params: Any):
    """What the executor does for a group: the launcher (first host) runs the group's commands."""
    check = get_check("nccl_allreduce_multi")
    p = check.make_params({**FAST, **params})
    nodes = tuple(NodeContext(hostname=h, expected_gpus=8) for h in hosts)
    group = GroupContext(nodes=nodes, launcher=nodes[0], tag=f"{tag}-{cluster.root.parent.name}")
    thresholds = check.make_thresholds(resolve_thresholds("nccl_allreduce_multi", profile))
    transport = cluster.transport(hosts[0])
    outputs = [transport.run(c) for c in check.group_commands(p, group)]
    try:
        measurements, verdict = run_check(check, p, thresholds, outputs, group.launcher)
        if not measurements:  # timed out / bad exit / unparseable: run_check's error stands
            return outputs, verdict
        return outputs, check.evaluate_group(measurements, thresholds, group)
    finally:
        Path(hostfile_path(group.tag)).unlink(missing_ok=True)


def value(measurements, name: str) -> float | None:
    return next(m.value for m in measurements if m.name == name)


# --- one node ----------------------------------------------------------------------------------


def test_it_passes_a_healthy_node(cluster: Cluster) -> None:
    measurements, verdict, series = run_single(cluster, "gpu01")
    assert verdict.status == PASS, verdict.reason
    assert verdict.findings[-1].reason.endswith("at 1 GiB (floor 460 GB/s)")
    assert 460 <= value(measurements, "busbw_peak") <= 480
    assert (value(measurements, "ranks"), value(measurements, "wrong")) == (8, 0)
    assert next(m.text for m in measurements if m.name == "collective") == "all_reduce"
    [curve] = series
    assert curve.x[0] == 1 << 20 and curve.x[-1] == 1 << 30 and curve.y[0] < curve.y[-1]


def test_it_fails_slow_nvlink_naming_busbw(cluster: Cluster) -> None:
    cluster.node("gpu02", nccl_busbw_factor=0.4)
    measurements, verdict, _ = run_single(cluster, "gpu02")
    assert verdict.status == FAIL
    # ~475 x 0.4; the peak may fall on either judged size (512 MiB, 1 GiB).
    assert re.fullmatch(r"busbw 1[89]\d\.\d GB/s at (512 MiB|1 GiB) below the 460 GB/s floor", verdict.reason)
    assert next(m for m in measurements if m.name == "busbw_peak").ok is False


def test_it_fails_wrong_results(cluster: Cluster) -> None:
    cluster.node("gpu03", nccl_wrong=3)
    _, verdict, _ = run_single(cluster, "gpu03")
    # 3 wrong elements per placement at each size >= 64 MiB: 5 sizes x 2 placements.
    assert (verdict.status, verdict.reason) == (
        FAIL,
        "#wrong = 30 (results differ from the reference; 10 wrong, first at 64 MiB out-of-place: 3)",
    )


def test_it_errors_when_a_gpu_is_missing(cluster: Cluster) -> None:
    cluster.node("gpu04", missing_gpu=5)
    measurements, verdict, _ = run_single(cluster, "gpu04")
    assert verdict.status == ERROR
    assert verdict.reason == "all_reduce_perf exited 1: Test CUDA failure common.cu:892 'invalid device ordinal'"
    assert measurements == []


def test_it_errors_when_the_sweep_stops_below_the_peak_floor(cluster: Cluster) -> None:
    _, verdict, _ = run_single(cluster, "gpu01", max_bytes="64M", peak_min_bytes="1G")
    assert verdict.status == ERROR
    assert verdict.reason == "largest size 64 MiB is below peak_min_bytes (1 GiB): cannot judge peak bandwidth"


def test_it_errors_without_validation(cluster: Cluster) -> None:
    check = get_check("nccl_allreduce")
    [cmd] = check.commands(check.make_params(FAST), NodeContext(hostname="gpu01", expected_gpus=8))
    argv = list(cmd.argv)
    argv[argv.index("-c") + 1] = "0"
    out = cluster.transport("gpu01").run(type(cmd)(argv=tuple(argv), timeout=cmd.timeout, env=cmd.env, label=cmd.label))
    _, verdict = run_check(check, FAST, None, [out], NodeContext(hostname="gpu01"))
    assert verdict.status == ERROR
    assert verdict.reason.startswith("results not validated: #wrong is N/A")


# --- across nodes --------------------------------------------------------------------------------


def test_it_passes_a_healthy_pair_through_mpirun(cluster: Cluster) -> None:
    outputs, verdict = run_group(cluster, ["gpu01", "gpu02"], "healthy")
    assert verdict.status == PASS, verdict.reason
    assert verdict.findings[-1].reason.endswith("(floor 300 GB/s) across gpu01, gpu02")
    assert outputs[0].exit_code == 0 and "# Rank 15 Group" in outputs[1].stdout.replace("#  Rank", "# Rank")


def test_it_passes_a_healthy_pair_through_srun(cluster: Cluster) -> None:
    _, verdict = run_group(cluster, ["gpu01", "gpu02", "gpu03"], "srun", launcher="srun", launcher_args="")
    assert verdict.status == PASS, verdict.reason


def test_it_fails_a_group_with_a_slow_port_without_blaming_one_node(cluster: Cluster) -> None:
    cluster.node("gpu04", net_slow_factor=0.5)
    _, verdict = run_group(cluster, HOSTS, "slowgroup")
    assert verdict.status == FAIL
    assert "below the 300 GB/s floor across gpu01, gpu02, gpu03, gpu04, gpu05, gpu06" in verdict.reason
    assert verdict.node_verdicts == {}


def test_it_fails_a_group_with_wrong_results(cluster: Cluster) -> None:
    cluster.node("gpu05", nccl_wrong=1)
    _, verdict = run_group(cluster, ["gpu05", "gpu06"], "wrong")
    assert verdict.status == FAIL
    assert verdict.reason == (
        "#wrong = 10 (results differ from the reference; 10 wrong, first at 64 MiB out-of-place: 1) across gpu05, gpu06"
    )


def test_it_localises_the_slow_node_by_halves(cluster: Cluster) -> None:
    """The planner (checks/core/localise.py) fed with the simulator's real runs of halves and pairs."""
    cluster.node("gpu04", net_slow_factor=0.5)
    _, root = run_group(cluster, HOSTS, "all")
    assert root.status == FAIL
    state = localise.start(HOSTS, root)
    while runs := localise.plan(state, capacity=8):
        done = []
        for index, run in enumerate(runs):
            outputs, verdict = run_group(cluster, list(run.nodes), f"r{state.rounds + 1}-{index}")
            assert outputs[0].command.stdin == "".join(f"{h} slots=8\n" for h in run.nodes)
            done.append((run, verdict))
        localise.record(state, done)
    localised = localise.conclude(state)
    assert localised.status == FAIL
    assert {h for h, v in localised.node_verdicts.items() if v.status != PASS} == {"gpu04"}
    assert "busbw" in localised.node_verdicts["gpu04"].reason
    assert localised.reason.startswith("localised to gpu04 by halves")
    assert [r.nodes for r in state.runs if r.round == 1] == [("gpu01", "gpu02", "gpu03"), ("gpu04", "gpu05", "gpu06")]


def test_it_errors_when_mpirun_lacks_slots(cluster: Cluster) -> None:
    transport = cluster.transport("gpu01")
    check = get_check("nccl_allreduce_multi")
    nodes = (NodeContext(hostname="gpu01", expected_gpus=8), NodeContext(hostname="gpu02", expected_gpus=8))
    group = GroupContext(nodes=nodes, launcher=nodes[0], tag=f"slots-{cluster.root.parent.name}")
    write, run = check.group_commands(check.make_params({**FAST, "gpus": 8}), group)
    # The hostfile offers 4 slots per node, the run asks for 16 ranks.
    small = type(write)(argv=write.argv, timeout=write.timeout, stdin=write.stdin.replace("slots=8", "slots=4"))
    try:
        outputs = [transport.run(small), transport.run(run)]
    finally:
        Path(hostfile_path(group.tag)).unlink(missing_ok=True)
    assert outputs[1].exit_code == 1
    _, verdict = run_check(check, FAST, None, outputs, group.launcher)
    assert verdict.status == ERROR
    assert verdict.reason.startswith(
        "all_reduce_perf exited 1: mpirun: There are not enough slots available in the system to satisfy the 16 slots"
    )


def test_it_errors_when_a_host_is_unreachable(cluster: Cluster) -> None:
    _, verdict = run_group(cluster, ["gpu01", "ghost"], "ghost")
    assert verdict.status == ERROR
    assert "ORTE was unable to reliably start one or more daemons" in verdict.reason


def test_it_writes_odd_hostnames_literally_without_a_shell(cluster: Cluster, tmp_path: Path) -> None:
    odd = "gpu$(touch${IFS}pwned);'01\"`touch${IFS}pwned2`"
    check = get_check("nccl_allreduce_multi")
    nodes = (NodeContext(hostname=odd), NodeContext(hostname="gpu02"))
    group = GroupContext(nodes=nodes, launcher=nodes[1], tag=f"odd $(x) {tmp_path.name}")
    write, _ = check.group_commands(check.make_params({"gpus": 2}), group)
    target = NodeTarget(hostname="gpu02", transport="local", local_env={"HOME": str(tmp_path)})
    try:
        out = LocalTransport(target).run(write)
        assert out.exit_code == 0, out.stderr
        assert Path(write.argv[-1]).read_text() == f"{odd} slots=2\ngpu02 slots=2\n"
        assert oct(Path(write.argv[-1]).stat().st_mode & 0o777) == "0o600"
    finally:
        Path(write.argv[-1]).unlink(missing_ok=True)
    assert not list(Path.cwd().glob("pwned*")) and not list(tmp_path.glob("pwned*"))
