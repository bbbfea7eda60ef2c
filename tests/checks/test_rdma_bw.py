"""rdma_bw: the ring plan covers every HCA port, commands are validated, and the judge names the slow
port (failing both ways), the slow pair (a cable), or says `error` when evidence is missing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    WARN,
    Command,
    CommandOutput,
    GroupContext,
    GroupVerdict,
    Measurement,
    NodeContext,
    ParamsError,
    Series,
)
from checks.core.fanout import run_fan_out_check
from checks.core.profiles import resolve_thresholds
from checks.rdma.bw import PAIRS_LABEL, RdmaBandwidth
from checks.rdma.plan import RdmaBwParams, neighbours, plan_pairs, runner_spec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "perftest"
NDR = (FIXTURES / "ib_write_bw-cx7-ndr400-b2b-dac.txt").read_text()
LAT = (FIXTURES / "ib_write_lat-a-mlx4-ib.txt").read_text()
CUDA_CLIENT = (FIXTURES / "ib_write_bw-a-use_cuda-a100-ib-k8s-client.txt").read_text()
CUDA_LINES = CUDA_CLIENT[: CUDA_CLIENT.index("-----")]
HOSTS = ["gpu01", "gpu02", "gpu03", "gpu04"]
B2 = NDR.replace("mlx5_0", "mlx5_2")
H100 = resolve_thresholds("rdma_bw", "H100-SXM-8")

# (client, server, hca) -> Gb/s; the default is a healthy NDR pair.
Rates = dict[tuple[str, str, str], float]


def group(hosts: list[str] = HOSTS, start_at: float | None = 1000.0) -> GroupContext:
    nodes = tuple(NodeContext(hostname=h, address=f"10.0.0.{i + 1}", expected_gpus=8) for i, h in enumerate(hosts))
    return GroupContext(nodes=nodes, launcher=nodes[0], tag="t", start_at=start_at)


def bw_text(hca: str, gbps: float, cuda: bool = False) -> str:
    text = NDR.replace("mlx5_0", hca).replace("392.38", f"{gbps + 0.04:.2f}").replace("392.34", f"{gbps:.2f}")
    return (CUDA_LINES + text) if cuda else text


def lat_text(hca: str, cuda: bool = False) -> str:
    text = LAT.replace("mlx4_0", hca)
    return (CUDA_LINES + text) if cuda else text


def outputs(
    params: RdmaBwParams,
    hosts: list[str] = HOSTS,
    rates: Rates | None = None,
    edit: Callable[[str, dict], None] | None = None,
) -> dict[str, list[CommandOutput]]:
    """Every node's runner output, as the runner prints it, for the perftest rates given."""
    rates = rates or {}
    g = group(hosts)
    per_node = {}
    for host in hosts:
        spec = runner_spec(params, g, g.nodes[hosts.index(host)])
        pred, succ = neighbours(hosts, host)
        procs = []
        for p in spec["processes"]:
            test, end = p["role"].split("_")
            client, server = (host, succ) if end == "client" else (pred, host)
            gbps = rates.get((client, server, p["rail"]), 392.34)
            cuda = params.use_cuda
            text = lat_text(p["rail"], cuda) if test == "lat" else bw_text(p["rail"], gbps, cuda=cuda)
            proc = {**p, "exit_code": 0, "timed_out": False, "error": "", "stdout": text, "stderr": ""}
            if edit is not None:
                edit(host, proc)
            procs.append(proc)
        doc = {"schema": 1, "host": host, "start_at": 1000.0, "processes": procs}
        command = Command(argv=("python3", "-"), timeout=100, label=f"{PAIRS_LABEL} on {host}")
        per_node[host] = [CommandOutput(command=command, stdout=json.dumps(doc), stderr="", exit_code=0)]
    return per_node


def judge(
    per_node: dict[str, list[CommandOutput]],
    params: RdmaBwParams,
    thresholds: dict[str, Any] = H100,
    hosts: list[str] = HOSTS,
) -> tuple[list[Measurement], GroupVerdict, list[Series]]:
    return run_fan_out_check(RdmaBandwidth(), params, thresholds, per_node, [], group(hosts))


def test_it_plans_every_port_as_a_client_and_as_a_server() -> None:
    params = RdmaBwParams()
    pairs = plan_pairs(params, HOSTS)
    assert len(pairs) == 8 * len(HOSTS)
    for host in HOSTS:
        for hca in params.rails:
            assert sum(1 for p in pairs if p.client == host and p.hca == hca) == 1
            assert sum(1 for p in pairs if p.server == host and p.hca == hca) == 1
    assert all(p.client != p.server for p in pairs)
    # Two nodes: each is the other's client on every rail.
    two = plan_pairs(params, ["b", "a"])
    assert {(p.client, p.server) for p in two} == {("a", "b"), ("b", "a")}


def test_each_node_serves_its_predecessor_and_writes_to_its_successor_on_every_rail() -> None:
    params = RdmaBwParams(use_cuda=True, gpus="7,6,5,4,3,2,1,0")
    g = group()
    spec = runner_spec(params, g, g.nodes[1])  # gpu02: serves gpu01, writes to gpu03 (10.0.0.3)
    assert spec["start_at"] == 1000.0
    procs = spec["processes"]
    assert len(procs) == 8 * 4
    clients = [p for p in procs if p["role"] == "bw_client"]
    assert {p["peer"] for p in clients} == {"gpu03"}
    assert all(p["argv"][-1] == "10.0.0.3" for p in clients)
    first = next(p for p in clients if p["rail"] == "mlx5_0")
    assert first["argv"][:6] == ["ib_write_bw", "-d", "mlx5_0", "-p", "18515", "-F"]
    assert "--report_gbits" in first["argv"] and "-a" in first["argv"] and "--use_cuda=7" in first["argv"]
    servers = [p for p in procs if p["role"].endswith("_server")]
    assert {p["peer"] for p in servers} == {"gpu01"} and all(p["offset_s"] is None for p in servers)
    lat = next(p for p in procs if p["role"] == "lat_client" and p["rail"] == "mlx5_3")
    assert lat["argv"][:5] == ["ib_write_lat", "-d", "mlx5_3", "-p", str(18515 + 2 * 3 + 1)]
    # Latency first, then bandwidth, at one moment on every node.
    assert lat["offset_s"] == 0 and first["offset_s"] == params.lat_window_s
    ports = {(p["rail"], p["argv"][4]) for p in procs}
    assert len({port for _, port in ports}) == 16  # one bandwidth and one latency port per rail


def test_it_runs_the_runner_with_its_spec_on_argv() -> None:
    check = RdmaBandwidth()
    params = RdmaBwParams()
    [command] = check.node_commands(params, group(), group().nodes[0])
    assert command.argv[:2] == ("python3", "-") and json.loads(command.argv[2])["schema"] == 1
    assert command.stdin is not None and "perftest pair runner" in command.stdin
    assert command.timeout == check.start_delay_s(params, 4) + params.limit_s
    assert check.timeout(params) > params.limit_s


@pytest.mark.parametrize(
    "values",
    [{"hcas": "mlx5_0;reboot"}, {"hcas": "-d"}, {"hcas": "mlx5_0,mlx5_0"}, {"gpus": "0,1"}, {"bw_binary": "-x"}],
)
def test_it_refuses_params_that_could_reach_argv_unchecked(values: dict) -> None:
    with pytest.raises(ParamsError):
        RdmaBandwidth.make_params(values)


@pytest.mark.parametrize("address", ["-oProxyCommand=x", "a b", "host;id", "$(id)"])
def test_it_refuses_a_peer_address_that_is_not_an_address(address: str) -> None:
    nodes = (NodeContext(hostname="a", address="10.0.0.1"), NodeContext(hostname="b", address=address))
    g = GroupContext(nodes=nodes, launcher=nodes[0])
    with pytest.raises(ParamsError, match="not an IP address or hostname"):
        runner_spec(RdmaBwParams(), g, nodes[0])


def test_it_connects_to_the_hostname_when_a_node_has_no_address() -> None:
    nodes = (NodeContext(hostname="a"), NodeContext(hostname="b.cluster.local"))
    spec = runner_spec(RdmaBwParams(hcas="mlx5_0"), GroupContext(nodes=nodes, launcher=nodes[0]), nodes[0])
    assert [p["argv"][-1] for p in spec["processes"] if p["role"] == "bw_client"] == ["b.cluster.local"]


def test_it_refuses_a_start_delay_the_runner_would_refuse() -> None:
    with pytest.raises(ParamsError, match="start delay"):
        RdmaBandwidth().start_delay_s(RdmaBwParams(), 5000)


def test_it_passes_a_healthy_ndr_fabric() -> None:
    params = RdmaBwParams()
    ms, verdict, _ = judge(outputs(params), params)
    assert verdict.status == PASS, verdict.reason
    assert "32 pairs on 8 rails within spec" in verdict.reason
    pair = [m for m in ms if m.name == "pair_bw_gbps"]
    assert len(pair) == 32 and all(m.ok and m.threshold == ">= 360" for m in pair)
    assert pair[0].labels["client"] != pair[0].labels["server"]
    per_gpu = [m for m in ms if m.name == "node_bw_per_gpu_gbps"]
    assert [m.value for m in per_gpu] == [392.34] * 4 and all(m.ok for m in per_gpu)
    lat = [m for m in ms if m.name == "pair_lat_typical_us"]
    assert len(lat) == 32 and lat[0].value == 0.98 and lat[0].ok
    assert set(verdict.node_verdicts) == set(HOSTS)
    assert all(v.status == PASS for v in verdict.node_verdicts.values())


def test_a_duration_mode_pair_has_no_peak_and_is_judged_on_its_average() -> None:
    params = RdmaBwParams()

    def duration(host: str, proc: dict) -> None:
        if proc["role"] == "bw_client":
            text = " WARNING: BW peak won't be measured in this run.\n" + proc["stdout"]
            proc["stdout"] = text.replace("392.38", "0.00")

    ms, verdict, _ = judge(outputs(params, edit=duration), params)
    assert verdict.status == PASS, verdict.reason
    peaks = [m for m in ms if m.name == "pair_bw_peak_gbps"]
    assert len(peaks) == 32 and all(m.value is None and "duration mode" in m.labels["not_measured"] for m in peaks)
    assert all(m.value == 392.34 for m in ms if m.name == "pair_bw_gbps")
    healthy, _, _ = judge(outputs(params), params)
    assert {m.value for m in healthy if m.name == "pair_bw_peak_gbps"} == {392.38}


def test_it_blames_a_degraded_hca_slow_both_ways() -> None:
    params = RdmaBwParams()
    # gpu03's mlx5_2 trained at 200 Gb/s: slow as server of gpu02 and as client of gpu04.
    rates = {("gpu02", "gpu03", "mlx5_2"): 196.17, ("gpu03", "gpu04", "mlx5_2"): 196.17}
    _, verdict, _ = judge(outputs(params, rates=rates), params)
    assert verdict.status == FAIL
    bad = verdict.node_verdicts["gpu03"]
    assert bad.status == FAIL and "mlx5_2 of gpu03 failing both ways" in bad.reason
    assert "as client of gpu04" in bad.reason and "as server of gpu02" in bad.reason
    # Its partners are fine with their other partners: not blamed.
    assert {h: v.status for h, v in verdict.node_verdicts.items() if h != "gpu03"} == dict.fromkeys(
        ["gpu01", "gpu02", "gpu04"], PASS
    )
    assert "gpu03" in verdict.reason


def test_a_port_whose_link_refuses_both_ways_fails_named_not_errors() -> None:
    """Both ends reached each other over TCP, then the HCAs could not bring the RDMA connection up
    (perftest on a port that is down): evidence of a dead port, so `fail` naming it."""
    params = RdmaBwParams()
    refused = {
        "exit_code": 1,
        "stdout": "",
        "stderr": " Failed to modify QP to RTR\n Unable to Connect the HCA's through the link\n",
    }

    def port_down(host: str, proc: dict) -> None:
        on_gpu03 = (
            (host == "gpu03")
            or (host == "gpu02" and proc["role"].endswith("client"))
            or (host == "gpu04" and proc["role"].endswith("server"))
        )
        if on_gpu03 and proc["rail"] == "mlx5_3":
            proc.update(refused)

    _, verdict, _ = judge(outputs(params, edit=port_down), params)
    assert verdict.status == FAIL
    bad = verdict.node_verdicts["gpu03"]
    assert bad.status == FAIL and "mlx5_3 of gpu03 failing both ways" in bad.reason, bad.reason
    assert "Unable to Connect the HCA's through the link" in bad.reason or "RTR" in bad.reason
    assert {h: v.status for h, v in verdict.node_verdicts.items() if h != "gpu03"} == dict.fromkeys(
        ["gpu01", "gpu02", "gpu04"], PASS
    )


def test_it_blames_the_link_of_one_slow_pair_on_both_ends() -> None:
    params = RdmaBwParams()
    rates = {("gpu02", "gpu03", "mlx5_1"): 98.04}  # a bad cable: only that pair is slow
    _, verdict, _ = judge(outputs(params, rates=rates), params)
    assert verdict.status == FAIL
    for host in ("gpu02", "gpu03"):
        v = verdict.node_verdicts[host]
        assert v.status == FAIL
        assert "pair gpu02 mlx5_1 -> gpu03 mlx5_1" in v.reason and "link between them" in v.reason
        assert "98.04 Gb/s below 360" in v.reason
    assert verdict.node_verdicts["gpu01"].status == PASS and verdict.node_verdicts["gpu04"].status == PASS


def test_two_nodes_name_both_ends_when_a_pair_is_slow() -> None:
    params = RdmaBwParams(hcas="mlx5_0,mlx5_1")
    hosts = ["a", "b"]
    rates = {("a", "b", "mlx5_1"): 150.0, ("b", "a", "mlx5_1"): 150.0}
    _, verdict, _ = judge(outputs(params, hosts, rates), params, hosts=hosts)
    assert verdict.status == FAIL
    assert all("cannot tell which end" in verdict.node_verdicts[h].reason for h in hosts)


def test_it_errors_when_gpudirect_was_asked_and_the_output_shows_host_memory() -> None:
    params = RdmaBwParams(use_cuda=True)
    _, verdict, _ = judge(outputs(params), params)
    assert verdict.status == PASS, verdict.reason  # the GPU buffer is in every output

    def host_memory(host: str, proc: dict) -> None:
        if host == "gpu02" and proc["rail"] == "mlx5_4" and proc["role"] == "bw_server":
            proc["stdout"] = proc["stdout"].replace(
                "cuMemAlloc() of a 33554432 bytes GPU buffer\nallocated GPU buffer address at 00007fb29c000000 "
                "pointer=0x7fb29c000000\n",
                "Host allocation selected, calling memalign allocator for 33554432 bytes with 4096 page size\n",
            )

    _, verdict, _ = judge(outputs(params, edit=host_memory), params)
    assert verdict.status == ERROR
    reason = verdict.node_verdicts["gpu01"].reason + verdict.node_verdicts["gpu02"].reason
    assert "GPUDirect asked (--use_cuda) but the output shows host" in reason
    # And a run without any CUDA line at all (a perftest that ignored it) is no evidence either.
    plain = outputs(RdmaBwParams())
    _, verdict, _ = judge(plain, params)
    assert verdict.status == ERROR and "GPUDirect asked" in verdict.reason


def test_it_errors_when_a_pair_output_is_missing() -> None:
    params = RdmaBwParams()

    def drop(host: str, proc: dict) -> None:
        if host == "gpu04" and proc["rail"] == "mlx5_3" and proc["role"] == "bw_client":
            proc["role"] = "gone"

    _, verdict, _ = judge(outputs(params, edit=drop), params)
    assert verdict.status == ERROR
    assert "not in its node's runner output" in verdict.node_verdicts["gpu04"].reason
    # A node whose runner printed nothing: every pair through it is not measured, and it is named.
    per_node = outputs(params)
    per_node["gpu02"] = []
    _, verdict, _ = judge(per_node, params)
    assert verdict.status == ERROR and verdict.node_verdicts["gpu02"].status == ERROR
    assert verdict.node_verdicts["gpu02"].reason == "gpu02: nothing ran"


@pytest.mark.parametrize(
    ("stdout", "exit_code", "why"),
    [
        ("garbage\x00\x01", 0, "not JSON"),
        ('{"schema": 2}', 0, "not its document"),
        ("", None, "no exit code"),
        ("", 2, "exited 2"),
    ],
)
def test_it_errors_on_a_runner_output_it_cannot_read(stdout: str, exit_code: int | None, why: str) -> None:
    params = RdmaBwParams()
    per_node = outputs(params)
    command = per_node["gpu03"][0].command
    per_node["gpu03"] = [CommandOutput(command=command, stdout=stdout, stderr="boom", exit_code=exit_code)]
    _, verdict, _ = judge(per_node, params)
    assert verdict.status == ERROR and why in verdict.node_verdicts["gpu03"].reason


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"exit_code": 1, "stdout": "", "stderr": "Couldn't connect to 10.0.0.3:18519\n"}, "Couldn't connect to"),
        ({"timed_out": True, "exit_code": -15}, "stopped at its deadline"),
        ({"stdout": B2[: len(B2) // 2]}, "no result table"),
        ({"stdout": B2[: B2.rindex("-----") - 40]}, "not closed"),
        ({"stdout": "nan nan\n"}, "not a perftest output"),
        ({"stdout": B2.replace("392.34", "nan")}, "must be finite"),
        ({"exit_code": None, "error": "ib_write_bw: No such file or directory"}, "No such file"),
    ],
)
def test_it_errors_on_a_pair_whose_perftest_did_not_run_or_printed_garbage(change: dict, why: str) -> None:
    params = RdmaBwParams()

    def broken(host: str, proc: dict) -> None:
        if host == "gpu02" and proc["rail"] == "mlx5_2" and proc["role"] == "bw_client":
            proc.update(change)

    _, verdict, _ = judge(outputs(params, edit=broken), params)
    assert verdict.status == ERROR
    assert why in verdict.node_verdicts["gpu02"].reason and why in verdict.node_verdicts["gpu03"].reason


def test_it_errors_when_perftest_ran_on_another_hca() -> None:
    params = RdmaBwParams()

    def elsewhere(host: str, proc: dict) -> None:
        if host == "gpu01" and proc["rail"] == "mlx5_5" and proc["role"] == "bw_client":
            proc["stdout"] = proc["stdout"].replace("mlx5_5", "mlx5_9")

    _, verdict, _ = judge(outputs(params, edit=elsewhere), params)
    assert verdict.status == ERROR and "ran on mlx5_9, not mlx5_5" in verdict.reason


def test_it_fails_a_pair_above_the_latency_ceiling_and_a_wrong_link_type() -> None:
    params = RdmaBwParams(hcas="mlx5_0")

    def slow(host: str, proc: dict) -> None:
        if host == "gpu01" and proc["role"] == "lat_client":
            proc["stdout"] = proc["stdout"].replace(" 0.98 ", " 9.80 ", 1)

    _, verdict, _ = judge(outputs(params, edit=slow), params)
    assert verdict.status == FAIL and "typical latency 9.8 us above 5 us" in verdict.reason

    def ethernet(host: str, proc: dict) -> None:
        proc["stdout"] = proc["stdout"].replace("Link type       : IB", "Link type       : Ethernet")

    _, verdict, _ = judge(outputs(params, edit=ethernet), params)
    assert verdict.status == FAIL and "link type Ethernet, expected IB" in verdict.reason


def test_it_fails_a_node_below_its_bandwidth_per_gpu() -> None:
    params = RdmaBwParams(hcas="mlx5_0,mlx5_1")  # two rails for eight GPUs: 98 Gb/s per GPU
    _, verdict, _ = judge(outputs(params), params)
    assert verdict.status == FAIL
    assert all("per GPU over 2 rails below 200" in v.reason for v in verdict.node_verdicts.values())


def test_it_warns_without_a_bandwidth_floor() -> None:
    params = RdmaBwParams()
    _, verdict, _ = judge(outputs(params), params, thresholds=resolve_thresholds("rdma_bw", None))
    assert verdict.status == WARN and verdict.reason.startswith("not judged")


def test_profiles_set_the_floors_per_fabric() -> None:
    assert resolve_thresholds("rdma_bw", "H200-SXM-8")["min_bw_gbps"] == 360.0
    a100 = resolve_thresholds("rdma_bw", "A100-SXM-8")
    assert (a100["min_bw_gbps"], a100["min_bw_per_gpu_gbps"]) == (185.0, 185.0)
