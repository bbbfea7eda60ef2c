"""The simulated perftest (testbed/sim/tools/ib_write_bw, ib_write_lat): a server and a client really
connect over TCP on 127.0.0.1, each end with its own state file; the ibstat faults and the cable fault
change what the pair measures. Then the pair runner (checks/probe/rdma_pairs.py) runs both ends of a
two-node ring on this host, and the check judges what it printed."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checks.core.base import FAIL, PASS, Command, CommandOutput, GroupContext, NodeContext
from checks.core.fanout import run_fan_out_check
from checks.core.profiles import resolve_thresholds
from checks.probe import rdma_pairs_source
from checks.rdma.bw import PAIRS_LABEL, RdmaBandwidth
from checks.rdma.perftest import PerftestRun, parse_perftest
from checks.rdma.plan import RdmaBwParams, runner_argv, runner_spec

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "testbed" / "sim" / "tools"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def state(tmp_path: Path, name: str, **faults: str) -> Path:
    path = tmp_path / f"{name}.state"
    path.write_text("".join(f"{k}={v}\n" for k, v in {"node": name, **faults}.items()))
    return path


def env(state_file: Path) -> dict[str, str]:
    return {**os.environ, "KILN_SIM_STATE": str(state_file)}


def run_pair(
    tmp_path: Path, tool: str, server_state: Path, client_state: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], tuple[str, str, int]]:
    """A server, then a client of it on 127.0.0.1; (the client's result, the server's stdout/stderr/rc)."""
    port = str(free_port())
    argv = [sys.executable, str(TOOLS / tool), *args, "-p", port]
    server = subprocess.Popen(argv, env=env(server_state), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert server.stdout is not None
    seen = ""
    while "Waiting for client" not in seen:  # it prints this once it listens
        line = server.stdout.readline()
        assert line, "the simulated server exited before listening"
        seen += line
    client = subprocess.run([*argv, "127.0.0.1"], env=env(client_state), capture_output=True, text=True, timeout=30)
    out, err = server.communicate(timeout=30)
    return client, (seen + out, err, server.returncode)


def avg(run: PerftestRun) -> float:
    return run.gbps(run.largest["bw_avg"])


def test_a_healthy_pair_runs_at_ndr_line_rate(tmp_path: Path) -> None:
    a, b = state(tmp_path, "a"), state(tmp_path, "b")
    client, (server_out, _, server_rc) = run_pair(tmp_path, "ib_write_bw", a, b, "-d", "mlx5_3", "-F", "--report_gbits")
    assert client.returncode == 0 and server_rc == 0, client.stderr
    run = parse_perftest(client.stdout)
    assert run.device == "mlx5_3" and run.header["Link type"] == "IB"
    assert avg(run) == pytest.approx(392.34, abs=0.01)
    assert run.largest["bytes"] == 65536 and not run.cuda.gpu_buffer
    assert avg(parse_perftest(server_out)) == pytest.approx(392.34, abs=0.01)


def test_a_slow_port_on_either_end_slows_the_pair_and_a_sweep_prints_every_size(tmp_path: Path) -> None:
    slow, b = state(tmp_path, "a", ib_port_rate="mlx5_2:200"), state(tmp_path, "b")
    client, _ = run_pair(tmp_path, "ib_write_bw", slow, b, "-d", "mlx5_2", "-F", "--report_gbits", "-a")
    run = parse_perftest(client.stdout)
    assert avg(run) == pytest.approx(196.17, abs=0.01)
    assert [int(r["bytes"]) for r in run.rows] == [2**i for i in range(1, 24)]
    client, _ = run_pair(tmp_path, "ib_write_bw", b, slow, "-d", "mlx5_2", "-F")  # MB/sec without --report_gbits
    run = parse_perftest(client.stdout)
    assert run.unit == "MB/sec" and avg(run) == pytest.approx(196.17, abs=0.02)


def test_a_cable_fault_slows_only_that_rail_to_that_peer(tmp_path: Path) -> None:
    faulty = state(tmp_path, "b", ib_cable_fault="mlx5_1:a")
    a, c = state(tmp_path, "a"), state(tmp_path, "c")
    client, _ = run_pair(tmp_path, "ib_write_bw", a, faulty, "-d", "mlx5_1", "--report_gbits")
    assert avg(parse_perftest(client.stdout)) == pytest.approx(392.34 / 4, abs=0.02)
    client, _ = run_pair(tmp_path, "ib_write_bw", faulty, a, "-d", "mlx5_1", "--report_gbits")  # both ways
    assert avg(parse_perftest(client.stdout)) == pytest.approx(392.34 / 4, abs=0.02)
    for server, dev in ((c, "mlx5_1"), (a, "mlx5_0")):  # another peer, another rail: healthy
        client, _ = run_pair(tmp_path, "ib_write_bw", server, faulty, "-d", dev, "--report_gbits")
        assert avg(parse_perftest(client.stdout)) == pytest.approx(392.34, abs=0.01)


def test_a_port_down_fails_both_ends_like_perftest(tmp_path: Path) -> None:
    down, b = state(tmp_path, "a", ib_port_down="mlx5_4"), state(tmp_path, "b")
    client, (_, server_err, server_rc) = run_pair(tmp_path, "ib_write_bw", down, b, "-d", "mlx5_4")
    assert client.returncode == 1 and server_rc == 1
    assert "Unable to Connect the HCA's through the link" in client.stderr and "through the link" in server_err


def test_a_client_without_a_server_cannot_connect(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, str(TOOLS / "ib_write_bw"), "-d", "mlx5_0", "-p", str(port), "127.0.0.1"]
    client = subprocess.run(argv, env=env(state(tmp_path, "a")), capture_output=True, text=True, timeout=30)
    assert client.returncode == 1
    assert f"Couldn't connect to 127.0.0.1:{port}" in client.stderr


def test_use_cuda_puts_both_ends_in_gpu_memory_unless_the_fault_says_host(tmp_path: Path) -> None:
    a, b = state(tmp_path, "a"), state(tmp_path, "b")
    cuda = ("-d", "mlx5_5", "--use_cuda=5", "--report_gbits")
    client, (server_out, _, _) = run_pair(tmp_path, "ib_write_bw", a, b, *cuda)
    for text in (client.stdout, server_out):
        run = parse_perftest(text)
        assert run.cuda.gpu_buffer and run.cuda.index == 5 and run.cuda.name == "NVIDIA H100 80GB HBM3"
    host = state(tmp_path, "b", perftest_cuda_host="1")
    client, _ = run_pair(tmp_path, "ib_write_bw", a, host, *cuda)
    run = parse_perftest(client.stdout)
    assert not run.cuda.gpu_buffer and run.cuda.host_buffer


def test_ib_write_lat_measures_about_a_microsecond(tmp_path: Path) -> None:
    a, b = state(tmp_path, "a"), state(tmp_path, "b")
    client, (server_out, _, _) = run_pair(tmp_path, "ib_write_lat", a, b, "-d", "mlx5_6", "-F")
    for text in (client.stdout, server_out):
        run = parse_perftest(text)
        assert run.kind == "lat" and run.rows[0]["bytes"] == 2
        assert run.rows[0]["t_typical"] == pytest.approx(1.02, abs=0.01)


def run_ring_on_this_host(tmp_path: Path, **faults: str) -> tuple[str, object]:
    """Both ends of a two-node ring on 127.0.0.1 (each node's clients reach its own servers), through the
    pair runner exactly as a node runs it; judged as nodes a and b."""
    base = random.Random(os.getpid() + time.time_ns()).randrange(20000, 60000, 8)
    # Margins for a busy CI machine (2 cores under xdist): each perftest is a Python start-up here, and
    # with 3 s of latency window and 1.5 s of start slack a loaded run saw a latency client time out.
    params = RdmaBwParams(hcas="mlx5_0,mlx5_1", base_port=base, lat_timeout_s=10, bw_timeout_s=30, start_slack_s=5)
    nodes = tuple(NodeContext(hostname=h, address="127.0.0.1", expected_gpus=2) for h in ("a", "b"))
    group = GroupContext(nodes=nodes, launcher=nodes[0], start_at=time.time() + 4)
    spec = runner_spec(params, group, nodes[0])
    path = f"{TOOLS}:{os.environ.get('PATH', '')}"
    node_env = {**os.environ, "PATH": path, "KILN_SIM_STATE": str(state(tmp_path, "a", **faults))}
    argv = list(runner_argv(spec))
    argv[0] = sys.executable
    done = subprocess.run(argv, input=rdma_pairs_source(), env=node_env, capture_output=True, text=True, timeout=60)
    command = Command(argv=tuple(argv), timeout=60, label=f"{PAIRS_LABEL} on a")
    out = CommandOutput(command=command, stdout=done.stdout, stderr=done.stderr, exit_code=done.returncode)
    thresholds = resolve_thresholds("rdma_bw", "H100-SXM-8")
    _, verdict, _ = run_fan_out_check(RdmaBandwidth(), params, thresholds, {"a": [out], "b": [out]}, [], group)
    return done.stdout, verdict


def test_the_pair_runner_measures_a_ring_through_the_simulator(tmp_path: Path) -> None:
    stdout, verdict = run_ring_on_this_host(tmp_path)
    doc = json.loads(stdout)
    assert {(p["role"], p["rail"]) for p in doc["processes"]} == {
        (f"{t}_{e}", r) for t in ("bw", "lat") for e in ("client", "server") for r in ("mlx5_0", "mlx5_1")
    }
    assert all(p["exit_code"] == 0 and not p["timed_out"] for p in doc["processes"]), doc
    assert verdict.status == PASS, verdict.reason  # type: ignore[attr-defined]


def test_the_pair_runner_shows_a_slow_port_to_the_judge(tmp_path: Path) -> None:
    _, verdict = run_ring_on_this_host(tmp_path, ib_port_rate="mlx5_1:200")
    assert verdict.status == FAIL  # type: ignore[attr-defined]
    assert "196.17 Gb/s below 360" in verdict.reason and "cannot tell which end" in verdict.reason  # type: ignore[attr-defined]
