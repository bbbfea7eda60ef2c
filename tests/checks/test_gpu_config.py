"""gpu_config: persistence, MIG, clocks, NVSwitch fabric, fabric manager, ACS and IOMMU mode.

Parsers on the real outputs in tests/fixtures/nvidia-smi-fabric and tests/fixtures/lspci; the check
on hand-made outputs and on the simulated node (testbed/sim: nvidia-smi -q, systemctl, lspci, cat).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from checks import get_check, run_check
from checks.core.base import ERROR, FAIL, PASS, Command, CommandOutput, Measurement, NodeContext, ParamsError
from checks.core.parsers import parse_output
from checks.core.profiles import resolve_params, resolve_thresholds
from checks.gpu.config_read import iommu_mode, read_fabricmanager_log, read_unit
from checks.gpu.lspci import read_acs
from checks.gpu.nvidia_smi_query import read_gpu_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi-fabric"
LSPCI = Path(__file__).resolve().parents[1] / "fixtures" / "lspci"
H100_Q = FIXTURES / "nvidia-smi-q-h100x8-535.161.08-fabric-completed.txt"
AZURE = FIXTURES / "nvidia-smi-q-fabric-insufficient-resources-azure.txt"
FM_LOG = FIXTURES / "fabricmanager-log-h100-nvswitch-nonfatal-error.log"
NODE = NodeContext(hostname="gpu01")
HEALTHY_UNIT = "LoadState=loaded\nActiveState=active\nSubState=running\nResult=success\n"
HEALTHY_CMDLINE = "BOOT_IMAGE=/vmlinuz-5.15.0-1042-nvidia root=UUID=x ro intel_iommu=on iommu=pt\n"


def by(ms: list[Measurement], name: str) -> list[Measurement]:
    return [m for m in ms if m.name == name]


# --- parsers on real outputs ---------------------------------------------------------------------


def test_it_reads_every_gpus_configuration_from_the_real_h100_query() -> None:
    ms = read_gpu_config(H100_Q.read_text())
    assert by(ms, "gpu_count")[0].value == 8
    buses = [m.labels["bus"] for m in by(ms, "persistence_mode")]
    assert buses[0] == "00000000:19:00.0" and buses[-1] == "00000000:DB:00.0" and len(buses) == 8
    assert {m.value for m in by(ms, "persistence_mode")} == {1.0}
    assert {(m.text, m.labels["pending"]) for m in by(ms, "mig_mode")} == {("Disabled", "Disabled")}
    for name in ("app_clock_graphics", "default_app_clock_graphics", "max_clock_graphics"):
        assert {(m.value, m.unit) for m in by(ms, name)} == {(1980.0, "MHz")}, name
    assert {m.value for m in by(ms, "clocks_event_app_setting")} == {0.0}
    assert {m.text for m in by(ms, "fabric_state")} == {"Completed"}
    assert {m.text for m in by(ms, "fabric_status")} == {"Success"}


def test_it_parses_the_fabric_of_both_real_outputs() -> None:
    fabric = parse_output("nvidia_smi_fabric", H100_Q.read_text()).measurements
    assert [(m.name, m.gpu, m.text) for m in fabric[:2]] == [
        ("fabric_state", 0, "Completed"),
        ("fabric_status", 0, "Success"),
    ]
    assert len(fabric) == 16
    azure = parse_output("nvidia_smi_fabric", AZURE.read_text()).measurements
    assert [(m.name, m.text) for m in azure] == [
        ("fabric_state", "Completed"),
        ("fabric_status", "Insufficient Resources"),
    ]


def test_it_reads_the_error_of_the_real_fabric_manager_log() -> None:
    ms = read_fabricmanager_log(FM_LOG.read_text())
    assert [(m.name, m.value) for m in ms[:2]] == [("fm_log_entries", 54.0), ("fm_log_errors", 1.0)]
    error = by(ms, "fm_log_error")[0]
    assert error.text.startswith("detected NVSwitch non-fatal error 12028")
    assert error.labels == {
        "time": "Feb 27 2025 15:10:02",
        "level": "ERROR",
        "nvswitch": "00000000:86:00.0",
        "physical_id": "3",
        "port": "61",
    }


def test_it_reads_acs_and_the_gpu_path_from_a_real_server_listing() -> None:
    ms = read_acs((LSPCI / "lspci-vvnn-supermicro-as4124gs-tnr-gpu-root-port.txt").read_text())
    gpu = by(ms, "pcie_endpoint")[0]
    assert gpu.labels == {"bdf": "0000:25:00.0", "kind": "gpu", "path": "0000:20:03.1"}
    assert "Quadro RTX 5000" in gpu.text
    # 20:03.1 has no ACS capability: nothing to record; 20:07.1 is a root port with SrcValid+.
    [acs] = by(ms, "acs_enabled")
    assert (acs.value, acs.labels["bdf"], acs.labels["port"], acs.labels["below"]) == (1.0, "0000:20:07.1", "root", "")
    assert by(ms, "pci_functions")[0].value == 3


def test_it_reads_acs_on_of_a_real_switch_downstream_port() -> None:
    [acs] = by(read_acs((LSPCI / "lspci-vvv-amd-matisse-switch-downstream-acs-on.txt").read_text()), "acs_enabled")
    assert (acs.value, acs.labels["bdf"], acs.labels["port"]) == (1.0, "0000:03:02.0", "downstream")
    assert acs.labels["ctl"].startswith("SrcValid+ TransBlk- ReqRedir+ CmpltRedir+")


def test_it_records_a_real_access_denied_bridge_as_missing() -> None:
    [acs] = by(read_acs((LSPCI / "lspci-vvv-amd-matisse-bridge-access-denied.txt").read_text()), "acs_enabled")
    assert acs.value is None and "access denied" in acs.labels["missing"]


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("nvidia_smi_q", H100_Q),
        ("nvidia_smi_fabric", AZURE),
        ("fabricmanager_log", FM_LOG),
        ("lspci_acs", LSPCI / "lspci-vvv-amd-matisse-switch-downstream-acs-on.txt"),
    ],
)
def test_it_registers_its_parsers_with_the_cli(kind: str, path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "checks", "parse", kind, str(path)],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("cmdline", "mode"),
    [
        ("ro intel_iommu=on iommu=pt", "passthrough"),
        ("ro amd_iommu=off", "off"),
        ("ro iommu=off", "off"),
        ("ro iommu.passthrough=1", "passthrough"),
        ("ro intel_iommu=on", "translated"),
        ("ro iommu=nopt", "translated"),
        ("ro quiet splash", "default"),
        ("ro iommu=tp", "default"),  # a typo sets nothing: the kernel default stays
    ],
)
def test_it_reads_the_iommu_mode_from_the_kernel_command_line(cmdline: str, mode: str) -> None:
    assert iommu_mode(cmdline)[0] == mode


def test_it_reads_a_unit_that_does_not_exist() -> None:
    m = read_unit("LoadState=not-found\nActiveState=inactive\nSubState=dead\nResult=success\n", "nvidia-fabricmanager")
    assert (m.text, m.labels["loadstate"]) == ("inactive", "not-found")


# --- the check on hand-made outputs --------------------------------------------------------------


def outputs(
    query: str | None = None, unit: str | None = HEALTHY_UNIT, lspci: str | None = None, cmdline: str = HEALTHY_CMDLINE
) -> list[CommandOutput]:
    check = get_check("gpu_config")
    params = check.make_params(resolve_params("gpu_config", "H100-SXM-8"))
    texts = {
        "nvidia-smi -q": H100_Q.read_text() if query is None else query,
        "systemctl show": unit,
        "lspci -vvv": lspci,
        "kernel cmdline": cmdline,
    }
    out = []
    for command in check.commands(params, NODE):
        text = texts[command.label]
        if text is not None:
            out.append(CommandOutput(command, text, "", 0))
    return out


def judge(outs: list[CommandOutput], profile: str | None = "H100-SXM-8", **overrides: Any):
    thresholds = {**resolve_thresholds("gpu_config", profile), **overrides}
    return run_check(get_check("gpu_config"), None, thresholds, outs, NODE)


def test_it_passes_the_real_healthy_h100_node() -> None:
    ms, verdict = judge(outputs())
    assert verdict.status == PASS, verdict.reason
    assert verdict.reason.startswith("8 GPUs: persistence on, MIG disabled, applications clocks at default")
    assert "fabric Completed/Success, nvidia-fabricmanager active" in verdict.reason
    assert all(m.ok for m in ms if m.name in ("persistence_mode", "fabric_state", "fabric_status"))


def test_it_fails_the_azure_insufficient_resources_fabric_naming_the_gpu() -> None:
    azure = "\n".join(line.replace("Success", "Insufficient Resources") for line in H100_Q.read_text().split("\n"))
    _, verdict = judge(outputs(query=azure))
    assert verdict.status == FAIL
    assert (
        "GPUs 0, 1, 2, 3, 4, 5, 6, 7: fabric registration Completed with Status Insufficient Resources"
        in verdict.reason
    )


def test_it_fails_a_persistence_mode_off_naming_the_gpu() -> None:
    text = H100_Q.read_text()
    cut = text.index("GPU 00000000:5D:00.0")
    text = text[:cut] + text[cut:].replace(
        "Persistence Mode                      : Enabled", "Persistence Mode                      : Disabled", 1
    )
    _, verdict = judge(outputs(query=text))
    assert verdict.status == FAIL
    assert verdict.reason.startswith("GPU 3 (00000000:5D:00.0): persistence mode Disabled; enable nvidia-persistenced")


def test_it_fails_applications_clocks_below_their_default() -> None:
    text = H100_Q.read_text().replace(
        "    Applications Clocks\n        Graphics                          : 1980 MHz",
        "    Applications Clocks\n        Graphics                          : 1410 MHz",
        1,
    )
    _, verdict = judge(outputs(query=text))
    assert verdict.status == FAIL
    assert (
        "GPU 0 (00000000:19:00.0): graphics applications clock 1410 MHz, default 1980 MHz, max 1980" in verdict.reason
    )
    assert "nvidia-smi -rac -i 0" in verdict.reason


def test_it_errors_on_a_gpu_whose_facts_are_missing_never_passing() -> None:
    text = H100_Q.read_text().replace("    Persistence Mode                      : Enabled\n", "", 1)
    text = text.replace("        State                             : Completed\n", "", 1)
    _, verdict = judge(outputs(query=text))
    assert verdict.status == ERROR
    assert (
        "GPU 0 (00000000:19:00.0): persistence mode unknown (Persistence Mode absent from nvidia-smi -q)"
        in verdict.reason
    )
    assert "GPU 0 (00000000:19:00.0): NVSwitch fabric state unknown" in verdict.reason


@pytest.mark.parametrize("query", ["", "\x00\x01garbage\n", "Attached GPUs : 8\n"])
def test_it_errors_on_garbage_or_cut_nvidia_smi_output(query: str) -> None:
    ms, verdict = judge(outputs(query=query))
    assert verdict.status == ERROR and ms == []


def test_it_errors_when_the_query_lists_fewer_gpus_than_attached() -> None:
    text = H100_Q.read_text()
    _, verdict = judge(outputs(query=text[: text.index("GPU 00000000:DB:00.0")]))
    assert verdict.status == ERROR
    assert "lists 7 GPU sections but says 8 are attached" in verdict.reason


def test_it_fails_a_failed_fabric_manager() -> None:
    unit = "LoadState=loaded\nActiveState=failed\nSubState=failed\nResult=exit-code\n"
    _, verdict = judge(outputs(unit=unit))
    assert verdict.status == FAIL
    assert verdict.reason.startswith("nvidia-fabricmanager is failed (SubState failed, Result exit-code)")


def test_it_errors_on_a_unit_answer_without_its_state() -> None:
    _, verdict = judge(outputs(unit="garbage\n"))
    assert (verdict.status, verdict.reason) == (
        ERROR,
        "nvidia-fabricmanager: state unknown (systemctl show printed no LoadState, ActiveState, SubState, Result)",
    )


def test_it_fails_an_iommu_translating_dma() -> None:
    _, verdict = judge(outputs(cmdline="BOOT_IMAGE=/vmlinuz ro intel_iommu=on\n"))
    assert verdict.status == FAIL
    assert verdict.reason.startswith(
        "IOMMU translated (kernel command line: intel_iommu=on), expected off or passthrough"
    )


def test_it_errors_on_an_empty_kernel_command_line() -> None:
    _, verdict = judge(outputs(cmdline=""))
    assert (verdict.status, verdict.reason) == (ERROR, "IOMMU mode unknown (the kernel command line is empty)")


def test_it_does_not_require_fabric_on_a100_nor_without_a_profile() -> None:
    na = H100_Q.read_text().replace(
        "State                             : Completed", "State                             : N/A"
    )
    _, verdict = judge(outputs(query=na), profile="A100-SXM-8")
    assert verdict.status == PASS, verdict.reason
    _, verdict = judge(outputs(query=na), profile="H100-SXM-8")
    assert verdict.status == ERROR and "NVSwitch fabric state unknown (N/A" in verdict.reason


def test_it_judges_acs_by_scope() -> None:
    acs_on = (LSPCI / "lspci-vvv-amd-matisse-switch-downstream-acs-on.txt").read_text()
    # That listing holds none of the node's GPUs (an error), and its switch port has no GPU or NIC
    # listed below it: outside the default scope, judged only with acs_scope "all".
    _, verdict = judge(outputs(lspci=acs_on))
    assert (verdict.status, verdict.reason) == (
        ERROR,
        "GPUs 0, 1, 2, 3, 4, 5, 6, 7: not in the lspci listing (output cut, or a GPU fell off the bus)",
    )
    assert not [f for f in verdict.findings if f.status == FAIL]
    _, verdict = judge(outputs(lspci=acs_on), acs_scope="all")
    [fail] = [f for f in verdict.findings if f.status == FAIL]
    assert fail.reason.startswith("bridge 0000:03:02.0: ACS enabled (ACSCtl SrcValid+ TransBlk- ReqRedir+ CmpltRedir+")


def test_it_rejects_bad_settings() -> None:
    check = get_check("gpu_config")
    with pytest.raises(ParamsError):
        check.make_params({"fabric_manager_unit": "-H evil"})
    with pytest.raises(ParamsError):
        check.make_thresholds({"allowed_iommu_modes": "off,sometimes"})
    with pytest.raises(ParamsError):
        check.make_thresholds({"acs_scope": "nowhere"})


def test_it_runs_read_only_argv_commands() -> None:
    check = get_check("gpu_config")
    params = check.make_params(resolve_params("gpu_config", "H100-SXM-8"))
    commands = check.commands(params, NODE)
    assert [c.argv for c in commands] == [
        ("nvidia-smi", "-q"),
        ("systemctl", "show", "--property=LoadState", "--property=ActiveState", "--property=SubState",
         "--property=Result", "--", "nvidia-fabricmanager"),
        ("lspci", "-D", "-nn", "-vvv"),
        ("cat", "/proc/cmdline"),
    ]  # fmt: skip
    assert all(isinstance(c, Command) and c.read_only for c in commands)
    generic = check.commands(check.make_params(resolve_params("gpu_config", None)), NODE)
    assert [c.label for c in generic] == ["nvidia-smi -q", "lspci -vvv", "kernel cmdline"]


def test_it_is_in_the_catalog() -> None:
    from checks.core.base import REGISTRY, by_slug, catalogued

    assert by_slug("gpu-config") is REGISTRY["gpu_config"] in catalogued()


# --- the simulated node ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):
    from testbed.sim import build_simulator

    return build_simulator(tmp_path_factory.mktemp("sim"))


def run_sim(sim, tmp_path: Path, profile: str = "H100-SXM-8", **faults: Any):
    from testbed.sim import node_env, write_state
    from worker.ssh import LocalTransport, NodeTarget

    state = tmp_path / "gpu01" / "state"
    write_state(state, node="gpu01", **faults)
    transport = LocalTransport(NodeTarget(hostname="gpu01", transport="local", local_env=node_env(sim, state)))
    check = get_check("gpu_config")
    params = check.make_params(resolve_params("gpu_config", profile))
    outs = [transport.run(c) for c in check.commands(params, NODE)]
    return run_check(check, params, resolve_thresholds("gpu_config", profile), outs, NODE)


def test_it_passes_the_simulated_healthy_node(sim, tmp_path: Path) -> None:
    ms, verdict = run_sim(sim, tmp_path)
    assert verdict.status == PASS, verdict.reason
    assert "ACS off on 16 bridges, IOMMU passthrough" in verdict.reason
    assert len(by(ms, "pcie_endpoint")) == 16


def test_it_passes_the_simulated_a100_node(sim, tmp_path: Path) -> None:
    _, verdict = run_sim(sim, tmp_path, profile="A100-SXM-8", model="NVIDIA A100-SXM4-80GB")
    assert verdict.status == PASS, verdict.reason


def test_it_fails_the_simulated_fabric_manager_down(sim, tmp_path: Path) -> None:
    _, verdict = run_sim(sim, tmp_path, fabric_manager_down=1)
    assert verdict.status == FAIL
    assert verdict.reason.startswith(
        "nvidia-fabricmanager is failed (SubState failed, Result exit-code): systemctl restart nvidia-fabricmanager"
    )
    assert "GPUs 0, 1, 2, 3, 4, 5, 6, 7: fabric registration In Progress (Status N/A)" in verdict.reason


def test_it_fails_the_simulated_acs_on_naming_the_bridge(sim, tmp_path: Path) -> None:
    _, verdict = run_sim(sim, tmp_path, acs_on=1)
    assert verdict.status == FAIL
    assert verdict.reason.startswith("bridge 0000:17:00.0 (above 0000:18:00.0): ACS enabled (ACSCtl SrcValid+")


def test_it_fails_the_simulated_persistence_off_gpu(sim, tmp_path: Path) -> None:
    _, verdict = run_sim(sim, tmp_path, persistence_off_gpu=6)
    assert (verdict.status, verdict.reason.split(";")[0]) == (
        FAIL,
        "GPU 6 (00000000:BA:00.0): persistence mode Disabled",
    )


def test_it_fails_the_simulated_mig_and_low_clocks(sim, tmp_path: Path) -> None:
    _, verdict = run_sim(sim, tmp_path, mig_gpu=1, app_clocks_low_gpu=2)
    assert verdict.status == FAIL
    assert "GPU 1 (00000000:2A:00.0): MIG mode Enabled (pending Enabled), expected Disabled" in verdict.reason
    assert "GPU 2 (00000000:3A:00.0): graphics applications clock 1410 MHz, default 1980 MHz" in verdict.reason


def test_it_fails_the_simulated_iommu_on(sim, tmp_path: Path) -> None:
    _, verdict = run_sim(sim, tmp_path, cmdline="BOOT_IMAGE=/vmlinuz ro amd_iommu=on")
    assert verdict.status == FAIL and verdict.reason.startswith("IOMMU translated (kernel command line: amd_iommu=on)")


def test_it_errors_on_the_simulated_lspci_without_root(sim, tmp_path: Path) -> None:
    _, verdict = run_sim(sim, tmp_path, lspci_denied=1)
    assert verdict.status == ERROR
    assert verdict.reason.startswith("ACS state unknown on 32 bridges (0000:15:01.0, 0000:16:00.0")
    assert "it needs root" in verdict.reason


def test_it_errors_on_garbage_from_the_simulated_nvidia_smi(sim, tmp_path: Path) -> None:
    ms, verdict = run_sim(sim, tmp_path, garbage=1)
    assert verdict.status == ERROR and ms == []


def test_the_simulated_tools_answer_as_documented(tmp_path: Path) -> None:
    from testbed.sim import TOOLS_DIR, write_state

    state = tmp_path / "state"
    write_state(state, node="gpu01", fabric_manager_down=1, cmdline="ro iommu=pt")
    env = {**os.environ, "KILN_SIM_STATE": str(state)}

    def tool(*argv: str) -> subprocess.CompletedProcess[str]:
        shell = (TOOLS_DIR / argv[0]).read_text().startswith("#!/bin/sh")  # the simulated cat is sh
        interpreter = "sh" if shell else sys.executable
        return subprocess.run(
            [interpreter, str(TOOLS_DIR / argv[0]), *argv[1:]], env=env, capture_output=True, text=True, check=False
        )

    active = tool("systemctl", "is-active", "nvidia-fabricmanager")
    assert (active.stdout, active.returncode) == ("failed\n", 3)
    other = tool("systemctl", "is-active", "sshd")
    assert (other.stdout, other.returncode) == ("inactive\n", 3)
    assert tool("systemctl", "show", "-p", "LoadState", "nosuch").stdout == "LoadState=not-found\n"
    assert tool("systemctl", "restart", "nvidia-fabricmanager").returncode == 1
    assert tool("cat", "/proc/cmdline").stdout == "ro iommu=pt\n"
    (tmp_path / "f").write_text("real cat\n")
    assert tool("cat", str(tmp_path / "f")).stdout == "real cat\n"
    plain = tool("lspci", "-vvv").stdout
    assert plain.startswith("00:00.0 Host bridge: Intel Corporation Device (rev 20)\n")
    assert tool("lspci", "-t").returncode == 1


def test_a_cut_lspci_listing_never_passes(sim, tmp_path: Path) -> None:
    from testbed.sim import node_env, write_state
    from worker.ssh import LocalTransport, NodeTarget

    state = tmp_path / "state"
    write_state(state, node="gpu01")
    transport = LocalTransport(NodeTarget(hostname="gpu01", transport="local", local_env=node_env(sim, state)))
    check = get_check("gpu_config")
    params = check.make_params(resolve_params("gpu_config", "H100-SXM-8"))
    outs = [transport.run(c) for c in check.commands(params, NODE)]
    lspci = next(i for i, o in enumerate(outs) if o.command.label == "lspci -vvv")
    text = outs[lspci].stdout
    for cut in (text[: len(text) // 2], text.replace("Bus: primary=16", "Bus: primary=nan", 1)):
        hostile = [replace(o, stdout=cut) if i == lspci else o for i, o in enumerate(outs)]
        _, verdict = run_check(check, params, resolve_thresholds("gpu_config", "H100-SXM-8"), hostile, NODE)
        assert verdict.status == ERROR, verdict.reason


def test_it_errors_when_lspci_lists_none_of_the_gpus() -> None:
    host_only = "0000:00:00.0 Host bridge [0600]: Intel Corporation Device [8086:09a2] (rev 20)\n"
    _, verdict = judge(outputs(lspci=host_only))
    assert verdict.status == ERROR
    assert verdict.reason.startswith("GPUs 0, 1, 2, 3, 4, 5, 6, 7: not in the lspci listing")
