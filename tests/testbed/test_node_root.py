"""Each simulated node has its own file tree (its sysfs), named in its environment: a check's file
reader (checks/core/node_files.py) reads it there, a real node's /sys otherwise, and a fault written
into one node's tree stays that node's."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from checks.core.base import CommandOutput, EvidenceError
from checks.core.node_files import NODE_ROOT_ENV, read_files, read_files_command
from testbed.sim import SimPaths, build_simulator, node_env, node_root, write_node_file, write_state
from testbed.sim.node_root import NODE_ROOT_ENV as SIM_NODE_ROOT_ENV
from worker.ssh import LocalTransport, NodeTarget

NAMES = ("vendor", "class", "current_link_width")
DEVICES = "/sys/bus/pci/devices/*"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> SimPaths:
    return build_simulator(tmp_path_factory.mktemp("sim"))


def _read(sim: SimPaths, state: Path, names: tuple[str, ...] = NAMES) -> dict[str, dict[str, str | None]]:
    transport = LocalTransport(NodeTarget(hostname="n", transport="local", local_env=node_env(sim, state)))
    out = transport.run(read_files_command(DEVICES, names, label="pci", timeout=30))
    assert out.exit_code == 0, out.stderr
    return read_files(out.stdout, names)


def test_the_check_and_the_simulator_agree_on_the_variable() -> None:
    assert NODE_ROOT_ENV == SIM_NODE_ROOT_ENV


def test_each_node_reads_its_own_tree_and_a_fault_stays_in_one(sim: SimPaths, tmp_path: Path) -> None:
    a, b = tmp_path / "nodes" / "a b" / "state", tmp_path / "nodes" / "c" / "state"
    write_state(a, node="a")
    write_state(b, node="c", missing_gpu=2)
    assert node_env(sim, a)[NODE_ROOT_ENV] == str(node_root(a)) != str(node_root(b))
    write_node_file(a, "/sys/bus/pci/devices/0000:18:00.0/current_link_width", "8")
    write_node_file(a, "/sys/bus/pci/devices/0000:2a:00.0/class", None)
    files_a, files_b = _read(sim, a), _read(sim, b)
    gpus_a = [d for d, f in files_a.items() if f["vendor"] == "0x10de"]
    assert len(gpus_a) == 8 and len([d for d, f in files_b.items() if f["vendor"] == "0x10de"]) == 7
    assert files_a["/sys/bus/pci/devices/0000:18:00.0"]["current_link_width"] == "8"
    assert files_a["/sys/bus/pci/devices/0000:2a:00.0"]["class"] is None
    assert files_b["/sys/bus/pci/devices/0000:18:00.0"]["current_link_width"] == "16"
    write_state(a, node="a")  # a new state is a healthy tree again
    assert _read(sim, a)["/sys/bus/pci/devices/0000:18:00.0"]["current_link_width"] == "16"


def test_the_degraded_link_fault_is_in_the_tree_too(sim: SimPaths, tmp_path: Path) -> None:
    state = tmp_path / "n" / "state"
    write_state(state, node="n", pcie_degraded_gpu=3)
    files = _read(sim, state, ("current_link_speed", "current_link_width"))
    assert files["/sys/bus/pci/devices/0000:5d:00.0"] == {
        "current_link_speed": "16.0 GT/s PCIe",
        "current_link_width": "8",
    }
    assert files["/sys/bus/pci/devices/0000:18:00.0"]["current_link_speed"] == "32.0 GT/s PCIe"


def test_a_real_node_reads_below_slash() -> None:
    # No root in the environment: the same script reads the machine's own /sys (here, or a
    # container without PCI devices: then it reads none, and says so).
    command = read_files_command(DEVICES, ("vendor",), label="pci", timeout=30)
    proc = subprocess.run(command.argv, capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    files = read_files(proc.stdout, ("vendor",))
    assert all(d.startswith("/sys/bus/pci/devices/") for d in files)


def test_the_command_carries_its_arguments_outside_the_script() -> None:
    command = read_files_command(DEVICES, NAMES, label="pci", timeout=30)
    assert command.argv[:2] == ("sh", "-c") and command.argv[4:] == (DEVICES, *NAMES) and command.read_only
    assert "sys/bus" not in command.argv[2]
    assert shlex.split(shlex.join(command.argv)) == list(command.argv)
    for pattern in ("sys/x", "/sys/$(reboot)", "/sys/../etc", "/sys/a b"):
        with pytest.raises(ValueError):
            read_files_command(pattern, NAMES, label="x", timeout=1)
    for names in ((), ("a/b",), ("..",), ("x;y",)):
        with pytest.raises(ValueError):
            read_files_command(DEVICES, names, label="x", timeout=1)


def test_output_cut_or_foreign_is_no_evidence() -> None:
    whole = "ok\t/sys/d\tvendor\t0x10de\nend\t1\n"
    assert read_files(whole, ("vendor",)) == {"/sys/d": {"vendor": "0x10de"}}
    for text in ("ok\t/sys/d\tvendor\t0x10de\n", "end\t2\nok\t/sys/d\tvendor\t0x10de\n", "garbage\nend\t0\n"):
        with pytest.raises(EvidenceError):
            read_files(text, ("vendor",))
    cut = CommandOutput(read_files_command(DEVICES, ("vendor",), label="pci", timeout=1), "", "", 0)
    with pytest.raises(EvidenceError, match="no end line"):
        read_files(cut.stdout, ("vendor",))
