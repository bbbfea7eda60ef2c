"""host_bw: nvbandwidth parsing on real captures, judging, and the simulated nvbandwidth end to end."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from checks import get_check, run_check
from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    WARN,
    CommandOutput,
    EvidenceError,
    Measurement,
    NodeContext,
    ParamsError,
)
from checks.core.parsers import parse_output
from checks.core.profiles import resolve_thresholds
from checks.gpu.host_bw import NVBW_LABEL, PCIE_LABEL
from checks.gpu.nvbandwidth import D2D_READ, D2D_WRITE, D2H, H2D, parse_pcie_query, parse_report
from tests.checks.probe_docs import REPO

FIXTURES = REPO / "tests" / "fixtures" / "nvbandwidth"
GH200 = "nvbandwidth_v0.6_GH200.txt"
H100_PEERS = "nvbandwidth_v0.4_8xH100_d2d_read.txt"
T4 = "nvbandwidth_v0.8_4xT4_h2d_d2h_d2d.txt"
T4_H2D_ROW, T4_H2D_SUM = " 0     12.35     12.34     12.30     12.33", "SUM host_to_device_memcpy_ce 49.32"
# nvidia-smi's PCIe link query for the 4x T4 node (Gen3 x16), listed in another order than CUDA's:
# the check joins them by PCI bus id. The GPU at af (CUDA device 2) trained at x8.
T4_LINKS = (
    "0, 00000000:AF:00.0, 3, 3, 8, 16\n1, 00000000:3B:00.0, 3, 3, 16, 16\n"
    "2, 00000000:86:00.0, 3, 3, 16, 16\n3, 00000000:D8:00.0, 3, 3, 16, 16\n"
)


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def judge(
    stdout: str,
    *,
    tests: str = f"{H2D},{D2H},{D2D_READ}",
    links: str | None = None,
    gpus: int | None = None,
    profile: str | None = "H100-SXM-8",
    **overrides: Any,
) -> tuple[list[Measurement], Any]:
    check = get_check("host_bw")
    node = NodeContext(hostname="gpu01", expected_gpus=gpus)
    commands = check.commands(check.make_params({"tests": tests}), node)
    outputs = [CommandOutput(commands[0], stdout, "", 0)]
    if links is not None:
        outputs.append(CommandOutput(commands[1], links, "", 0))
    return run_check(check, None, resolve_thresholds("host_bw", profile, overrides), outputs, node)


def by(measurements: list[Measurement], name: str) -> list[Measurement]:
    return [m for m in measurements if m.name == name]


def parse_report_ms(stdout: str) -> list[Measurement]:
    return parse_output("nvbandwidth", stdout).measurements


# --- the parser on real captures -------------------------------------------------------------------


def test_it_parses_every_nvbandwidth_fixture() -> None:
    names = sorted(p.name for p in FIXTURES.glob("*.txt") if not p.name.endswith(".source.txt"))
    assert names == [H100_PEERS, GH200, T4]
    counts = {}
    for name in names:
        ms = parse_output("nvbandwidth", text(name)).measurements
        counts[name] = tuple(len(by(ms, n)) for n in ("h2d_gbps", "d2h_gbps", "d2d_gbps", "device"))
    assert counts == {H100_PEERS: (0, 0, 56, 8), GH200: (6, 2, 0, 1), T4: (4, 4, 12, 4)}


def test_it_pins_the_gh200_capture_with_two_cpu_rows_and_waived_tests() -> None:
    parsed = parse_output("nvbandwidth", text(GH200))
    h2d = {(m.labels["cpu"], m.gpu): m.value for m in by(parsed.measurements, "h2d_gbps")}
    assert h2d == {
        ("0", 0): 369.36, ("0", 1): 269.33, ("0", 2): 412.11,
        ("1", 0): 323.36, ("1", 1): 299.33, ("1", 2): 312.11,
    }  # fmt: skip
    d2h = by(parsed.measurements, "d2h_gbps")
    assert [(m.gpu, m.value, m.unit, m.labels) for m in d2h] == [(0, 295.15, "GB/s", {}), (1, 312.11, "GB/s", {})]
    device = by(parsed.measurements, "device")[0]
    assert (device.text, device.labels) == ("NVIDIA GH200 480GB", {"bus_id": "00000009:01:00"})
    assert parsed.warnings == ["17 test(s) waived (not supported on this system)"]


def test_it_pins_the_h100_peer_matrix_by_the_titles_arrow_and_never_reads_the_diagonal() -> None:
    pairs = by(parse_output("nvbandwidth", text(H100_PEERS)).measurements, "d2d_gbps")
    values = {(m.labels["src"], m.labels["dst"]): m.value for m in pairs}
    assert len(values) == 56 and not any(src == dst for src, dst in values)
    assert (values[("2", "4")], values[("4", "2")]) == (372.96, 370.38)  # "GPU(row) -> GPU(column)"
    assert (min(values.values()), max(values.values())) == (370.26, 372.96)
    assert {m.labels["test"] for m in pairs} == {"read"}


def test_it_reads_a_write_matrix_from_column_to_row() -> None:
    start = text(H100_PEERS).replace("memcpy_read_ce", "memcpy_write_ce").replace("GPU(row) ->", "GPU(row) <-")
    pairs = {(m.labels["src"], m.labels["dst"]): m for m in by(parse_report_ms(start), "d2d_gbps")}
    assert pairs[("4", "2")].value == 372.96 and pairs[("4", "2")].labels["test"] == "write"


def test_it_keeps_a_nan_cell_and_flags_it_invalid() -> None:
    bad = text(T4).replace(
        " 0     13.14     13.14     13.14     13.14", " 0     13.14     13.14     13.14       nan", 1
    )
    d2h = {m.gpu: m for m in by(parse_report_ms(bad), "d2h_gbps")}
    assert d2h[3].labels["invalid"] == "not a finite number: nan"
    _, verdict = judge(bad, gpus=4)
    assert verdict.status == ERROR and verdict.reason.startswith("impossible evidence: GPU 3 d2h_gbps = nan GB/s")


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda t: t[: t.index("SUM device_to_device_memcpy_read_ce")], "incomplete: device_to_device_memcpy_read_ce"),
        (lambda t: t[: t.index(" 2     10.01")], "incomplete: device_to_device_memcpy_read_ce"),
        (lambda t: t.replace(" 3      9.97     10.25     10.25       N/A\n", "", 1), "add up to 91.46"),
        (lambda t: t.replace(T4_H2D_ROW, " 0     12.35     12.34     99.30     12.33", 1), "add up to 136.32"),
        (lambda t: t.replace(T4_H2D_ROW, " 0     12.35     12.34     12.30", 1), "row 0 has 3 cells for 4 columns"),
        (
            lambda t: t.replace(T4_H2D_ROW, " 0     12.35     12.34     12.3x     12.33", 1),
            "'12.3x' is not a bandwidth",
        ),
        (lambda t: t.replace("13.14", "13.1\x00", 1), "binary data"),
    ],
)
def test_it_refuses_cut_or_corrupted_output(edit: Any, why: str) -> None:
    bad = edit(text(T4))
    with pytest.raises(EvidenceError, match=why.replace("(", r"\(")):
        parse_report(bad)
    measurements, verdict = judge(bad, gpus=4)
    assert (verdict.status, measurements) == (ERROR, []) and why in verdict.reason


def test_it_parses_the_pcie_link_query_and_refuses_junk() -> None:
    links = {(m.gpu, m.name): m for m in parse_pcie_query(T4_LINKS)}
    assert links[(0, "pcie_width_current")].value == 8 and links[(0, "pcie_width_current")].unit == "lanes"
    assert links[(0, "pcie_gen_max")].labels == {"bus_id": "00000000:AF:00.0"}
    missing = parse_pcie_query("0, 00000000:AF:00.0, [N/A], 3, 16, 16\n")[0]
    assert (missing.value, missing.labels["missing"]) == (None, "nvidia-smi printed '[N/A]'")
    for junk in ("", "No devices were found\n", "0, 00000000:AF:00.0, 3\n"):
        with pytest.raises(EvidenceError):
            parse_pcie_query(junk)


# --- judging -----------------------------------------------------------------------------------------


def test_it_passes_the_h100_peer_capture_on_the_h100_profile() -> None:
    measurements, verdict = judge(text(H100_PEERS), tests=D2D_READ, gpus=8)
    assert (verdict.status, verdict.reason) == (PASS, "8 GPUs: peer copies >= 370.3 GB/s (floor 335)")
    assert all(m.threshold == ">= 335" and m.ok for m in by(measurements, "d2d_gbps"))


def test_it_warns_without_floors() -> None:
    _, verdict = judge(text(T4), profile=None)
    assert verdict.status == WARN
    assert verdict.reason == (
        "host-to-device lowest 12.3 GB/s: not judged (no min_h2d_gbps floor set); device-to-host lowest 13.1 GB/s: "
        "not judged (no min_d2h_gbps floor set); peer copies lowest 10.0 GB/s: not judged (no min_d2d_gbps floor set)"
    )
    _, verdict = judge(text(GH200), tests=f"{H2D},{D2H}", profile=None)
    assert verdict.status == WARN and "host-to-device lowest 269.3 GB/s" in verdict.reason


def test_it_fails_a_slow_gpu_naming_its_peers_and_its_narrow_link() -> None:
    slow = text(T4).replace(T4_H2D_ROW, " 0     12.35     12.34      6.16     12.33", 1)
    slow = slow.replace(T4_H2D_SUM, "SUM host_to_device_memcpy_ce 43.18", 1)
    measurements, verdict = judge(slow, links=T4_LINKS, gpus=4, profile=None, min_h2d_gbps=10.0, min_d2h_gbps=10.0)
    assert verdict.status == FAIL
    assert verdict.reason == (
        "GPU 2 host-to-device 6.2 GB/s (floor 10), about half its peers (median 12.3); "
        "its PCIe link runs x8 of x16 (Gen3) at 00000000:AF:00.0"
    )
    h2d = {m.gpu: m for m in by(measurements, "h2d_gbps")}
    assert (h2d[2].ok, h2d[2].threshold, h2d[1].ok) == (False, ">= 10", True)


def test_it_says_when_a_slow_gpus_link_reads_full_width() -> None:
    full = T4_LINKS.replace("3, 3, 8, 16", "3, 3, 16, 16")
    _, verdict = judge(text(T4), links=full, gpus=4, profile=None, min_h2d_gbps=12.32, min_d2h_gbps=10.0)
    assert verdict.reason == (
        "GPU 2 host-to-device 12.3 GB/s (floor 12.32), 100% of its peers' median 12.3; "
        "its PCIe link reads Gen3 x16, full width and speed, at 00000000:AF:00.0"
    )


def test_it_fails_slow_peer_copies_naming_the_pairs() -> None:
    _, verdict = judge(text(T4), gpus=4, profile=None, min_h2d_gbps=10.0, min_d2h_gbps=10.0, min_d2d_gbps=10.2)
    assert verdict.status == FAIL
    assert verdict.reason == (
        "peer copies below the 10.2 GB/s floor: GPU 3 -> GPU 0 10.0 GB/s, GPU 1 -> GPU 0 10.0 GB/s, "
        "GPU 0 -> GPU 2 10.0 GB/s, GPU 2 -> GPU 0 10.0 GB/s"
    )
    _, verdict = judge(text(T4), gpus=4, profile=None, min_h2d_gbps=10.0, min_d2h_gbps=10.0, min_d2d_gbps=11.0)
    assert verdict.reason == "every peer copy below the 11 GB/s floor (lowest GPU 3 -> GPU 0 10.0 GB/s)"


def test_it_errors_on_a_gpu_missing_from_the_matrices() -> None:
    _, verdict = judge(text(T4), gpus=5, profile=None)
    assert verdict.status == ERROR
    assert verdict.reason == (
        "GPU 4: not in the host_to_device_memcpy_ce, device_to_host_memcpy_ce and "
        "device_to_device_memcpy_read_ce matrices"
    )


def test_it_errors_on_an_unmeasured_pair() -> None:
    na = text(T4).replace(" 0       N/A     10.24      9.99     10.24", " 0       N/A     10.24       N/A     10.24", 1)
    na = na.replace("SUM device_to_device_memcpy_read_ce 121.93", "SUM device_to_device_memcpy_read_ce 111.94", 1)
    measurements, verdict = judge(na, gpus=4)
    # The T4 is below the H100 floors (a proven fault); the unmeasured pair is still named.
    assert verdict.status == FAIL
    untold = "and could not tell: peer copies not measured in device_to_device_memcpy_read_ce (N/A): GPU 0 -> GPU 2"
    assert untold in verdict.reason
    pair = next(m for m in by(measurements, "d2d_gbps") if m.labels["src"] == "0" and m.labels["dst"] == "2")
    assert pair.value is None and "N/A" in pair.labels["missing"]


@pytest.mark.parametrize(
    ("stdout", "why"),
    [
        ("", "nvbandwidth printed nothing"),
        ("nvbandwidth Version: v0.8\n\nRunning host_to_device_memcpy_ce.\nError: cuMemcpyAsync failed\n\n",
         "nvbandwidth host_to_device_memcpy_ce failed: cuMemcpyAsync failed"),
        ("nvbandwidth Version: v0.8\n\nWaived: \n", "nvbandwidth printed no device_to_device_memcpy_read_ce result "
         "(it printed 1 'Waived' line(s)"),
        ("ERROR: Testcase device_to_device_memcpy_read_ce not found!\n", "printed no device_to_device_memcpy_read_ce "
         "result (it said 'ERROR: Testcase device_to_device_memcpy_read_ce not found!')"),
    ],
)  # fmt: skip
def test_it_errors_when_a_requested_test_did_not_run(stdout: str, why: str) -> None:
    _, verdict = judge(stdout, tests=D2D_READ if "Waived" in stdout or "ERROR" in stdout else H2D)
    assert verdict.status == ERROR and why in verdict.reason, verdict.reason


def test_it_ignores_a_later_tests_error_after_a_complete_one() -> None:
    after = text(H100_PEERS) + "ERROR: Testcase bogus not found!\n"
    _, verdict = judge(after, tests=D2D_READ, gpus=8)
    assert verdict.status == PASS


def test_it_builds_an_argv_and_validates_its_params() -> None:
    check = get_check("host_bw")
    commands = check.commands(check.make_params(None), NodeContext(hostname="gpu01"))
    assert commands[0].argv == ("nvbandwidth", "-t", H2D, "-t", D2H, "-t", D2D_READ)
    assert (commands[0].label, commands[0].env, commands[0].timeout) == (
        NVBW_LABEL, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, 600.0,
    )  # fmt: skip
    assert (
        commands[1].label == PCIE_LABEL
        and commands[1].read_only
        and commands[1].argv
        == (
            "nvidia-smi",
            "--query-gpu=index,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max",
            "--format=csv,noheader,nounits",
        )
    )
    custom = check.make_params({"binary": "/opt/nvbandwidth/nvbandwidth", "tests": D2D_WRITE, "timeout_s": 60})
    assert check.commands(custom, NodeContext(hostname="gpu01"))[0].argv == (
        "/opt/nvbandwidth/nvbandwidth",
        "-t",
        D2D_WRITE,
    )
    for bad in ({"binary": "nvbandwidth; rm -rf /"}, {"binary": "-v"}, {"tests": "all_to_host_memcpy_ce"},
                {"tests": ""}, {"tests": f"{H2D},{H2D}"}, {"timeout_s": 0}):  # fmt: skip
        with pytest.raises(ParamsError):
            check.make_params(bad)


def test_it_sets_floors_per_profile() -> None:
    assert resolve_thresholds("host_bw", "H100-SXM-8") == {
        "min_h2d_gbps": 48.0,
        "min_d2h_gbps": 48.0,
        "min_d2d_gbps": 335.0,
    }
    assert resolve_thresholds("host_bw", "A100-SXM-8")["min_h2d_gbps"] == 21.0
    assert resolve_thresholds("host_bw", "generic")["min_d2d_gbps"] is None


# --- the simulator -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):
    from testbed.sim import build_simulator

    return build_simulator(tmp_path_factory.mktemp("sim"))


def run_sim(sim, tmp_path: Path, profile: str = "H100-SXM-8", timeout_s: int = 60, **faults: Any):
    from testbed.sim import node_env, write_state
    from worker.ssh import LocalTransport, NodeTarget

    state = tmp_path / "gpu01" / "state"
    write_state(state, node="gpu01", **faults)
    transport = LocalTransport(NodeTarget(hostname="gpu01", transport="local", local_env=node_env(sim, state)))
    check = get_check("host_bw")
    node = NodeContext(hostname="gpu01", expected_gpus=8)
    outputs = [transport.run(c) for c in check.commands(check.make_params({"timeout_s": timeout_s}), node)]
    return run_check(check, None, resolve_thresholds("host_bw", profile), outputs, node)


def test_the_simulated_tool_prints_the_real_format(sim, tmp_path: Path) -> None:
    from testbed.sim import node_env, write_state

    state = tmp_path / "state"
    write_state(state, node="gpu01", pcie_degraded_gpu=5)
    argv = [str(sim.bin_dir / "nvbandwidth"), "-t", H2D, D2H, "-t", "bogus"]
    out = subprocess.run(argv, env=node_env(sim, state), capture_output=True, text=True, timeout=30, check=True).stdout
    assert "Device 5: NVIDIA H100 80GB HBM3 (00000000:ab:00)\n" in out and "ERROR: Testcase bogus not found!\n" in out
    assert "\n           0         1         2         3         4         5         6         7\n" in out
    h2d = {m.gpu: m.value for m in by(parse_output("nvbandwidth", out).measurements, "h2d_gbps")}
    assert len(h2d) == 8 and 55.0 < min(v for g, v in h2d.items() if g != 5) and 13.0 < (h2d[5] or 0) < 14.5
    query = [str(sim.bin_dir / "nvidia-smi"), "--query-gpu=index,pci.bus_id,pcie.link.width.current", "--format=csv"]
    smi = subprocess.run(query, env=node_env(sim, state), capture_output=True, text=True, timeout=30, check=True).stdout
    assert smi.splitlines()[0] == "index, pci.bus_id, pcie.link.width.current"
    assert smi.splitlines()[6] == "5, 00000000:AB:00.0, 8"


def test_it_passes_the_simulated_healthy_node(sim, tmp_path: Path) -> None:
    measurements, verdict = run_sim(sim, tmp_path)
    assert verdict.status == PASS, verdict.reason
    assert verdict.reason.startswith("8 GPUs: host-to-device >= 55.")
    counts = [len(by(measurements, n)) for n in ("h2d_gbps", "d2h_gbps", "d2d_gbps", "pcie_width_current")]
    assert counts == [8, 8, 56, 8]


def test_it_fails_the_simulated_pcie_degraded_gpu_naming_it_and_its_link(sim, tmp_path: Path) -> None:
    _, verdict = run_sim(sim, tmp_path, pcie_degraded_gpu=5)
    assert verdict.status == FAIL
    assert verdict.reason.startswith("GPU 5 host-to-device 13.8 GB/s (floor 48), device-to-host 13.8 GB/s (floor 48)")
    assert verdict.reason.endswith("; its PCIe link runs x8 of x16 (Gen4) at 00000000:AB:00.0")


def test_it_fails_the_simulated_nvlink_down_gpu(sim, tmp_path: Path) -> None:
    _, verdict = run_sim(sim, tmp_path, nvlink_down_gpu=3)
    assert verdict.status == FAIL and verdict.reason.startswith("GPU 3: all 14 peer copies below the 335 GB/s floor")


@pytest.mark.parametrize(
    ("faults", "why"),
    [
        ({"missing_gpu": 7}, "GPU 7: not in the host_to_device_memcpy_ce, device_to_host_memcpy_ce and"),
        ({"garbage": 1}, "nvbandwidth output holds binary data"),
        ({"hang": 1}, "nvbandwidth timed out after 2s"),
    ],
)
def test_it_errors_on_the_simulated_driver_faults(
    sim, tmp_path: Path, faults: dict[str, int], why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A hung driver hangs the PCIe query after nvbandwidth too: its own 30 s budget, shortened here.
    monkeypatch.setattr("checks.gpu.host_bw.PCIE_TIMEOUT_S", 2.0)
    _, verdict = run_sim(sim, tmp_path, timeout_s=2, **faults)
    assert verdict.status == ERROR and verdict.reason.startswith(why), verdict.reason


def test_it_warns_on_the_simulated_node_without_floors(sim, tmp_path: Path) -> None:
    _, verdict = run_sim(sim, tmp_path, profile="generic")
    assert verdict.status == WARN and "not judged (no min_h2d_gbps floor set)" in verdict.reason
