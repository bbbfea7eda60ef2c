"""sw_consistency: node facts (kernel, OS, driver, CUDA, VBIOS, NIC firmware) and the odd node out."""

from __future__ import annotations

from pathlib import Path

import pytest

from checks import get_check, run_check
from checks.core.base import ERROR, FAIL, PASS, Command, CommandOutput, Measurement, NodeContext
from checks.core.profiles import resolve_thresholds
from checks.software.consistency import FACTS_LABEL, SoftwareConsistency, split_sections
from checks.software.stack import STACK_LABEL
from tests.checks.probe_docs import REPO, gpu_doc, output, probe_doc

NODE = NodeContext(hostname="gpu001")
OS_RELEASE = 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n'
IBSTAT = (REPO / "tests/fixtures/ibstat/ibstat_H100_node_8xNDR400_some_down.txt").read_text()


def facts_stdout(kernel: str = "5.15.0-122-generic", os_release: str = OS_RELEASE, ibstat: str | None = IBSTAT) -> str:
    text = f"@@kiln-section kernel\n{kernel}\n\n@@kiln-rc 0\n@@kiln-section os_release\n{os_release}\n@@kiln-rc 0\n"
    text += "@@kiln-section ibstat\n"
    text += f"{ibstat}\n@@kiln-rc 0\n" if ibstat is not None else "@@kiln-rc 127\n"
    return text


STACK = {
    "nccl": ("/usr/lib/x86_64-linux-gnu/libnccl.so.2 -> /usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5\n", 0),
    "ofed": ("MLNX_OFED_LINUX-23.10-1.1.9.0:\n", 0),
    "ucx": ("# Library version: 1.16.0\n# Library path: /usr/lib/libucs.so.0\n# API headers version: 1.16.0\n", 0),
    "enroot": ("3.4.1\n", 0),
    "slurm": ("slurm 23.11.4\n", 0),
    "pyxis": ("      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH\npackage: 0.20.0-1\n", 0),
}


def stack_stdout(**sections: tuple[str, int]) -> str:
    """The stack script's output: STACK with some sections replaced by (text, exit status)."""
    merged = {**STACK, **sections}
    return "".join(f"@@kiln-section {name}\n{text}\n@@kiln-rc {rc}\n" for name, (text, rc) in merged.items())


def judge(doc: dict | None = None, stdout: str | None = None, stderr: str = "", stack: str | None = None, **overrides):
    facts = CommandOutput(Command(("sh", "-c", "..."), 30, label=FACTS_LABEL), stdout or facts_stdout(), stderr, 0)
    versions = CommandOutput(Command(("sh", "-c", "..."), 60, label=STACK_LABEL), stack or stack_stdout(), "", 0)
    thresholds = resolve_thresholds("sw_consistency", None, overrides)
    return run_check(
        get_check("sw_consistency"), None, thresholds, [*output(doc or probe_doc()), facts, versions], NODE
    )


def by(measurements: list[Measurement], name: str) -> list[Measurement]:
    return [m for m in measurements if m.name == name]


def test_it_records_every_fact_and_passes_with_them() -> None:
    measurements, verdict = judge()
    assert verdict.status == PASS
    assert verdict.reason == (
        "kernel 5.15.0-122-generic, OS Ubuntu 22.04.4 LTS, driver 550.54.15, CUDA 12.4, VBIOS 96.00.89.00.01, "
        "NIC firmware MT4125 22.38.1002, MT4129 28.39.1002, NCCL 2.21.5, RDMA stack MLNX_OFED_LINUX-23.10-1.1.9.0, "
        "UCX 1.16.0, Enroot 3.4.1, Slurm 23.11.4, Pyxis 0.20.0-1"
    )
    assert by(measurements, "os")[0].labels == {"id": "ubuntu", "version_id": "22.04"}
    assert len(by(measurements, "vbios")) == 8
    nic = {m.labels["ca"]: m.text for m in by(measurements, "nic_firmware")}
    assert (len(nic), nic["mlx5_0"], nic["mlx5_1"]) == (12, "28.39.1002", "22.38.1002")


def test_it_fails_pinned_values_that_differ() -> None:
    _, verdict = judge(expected_kernel="6.8.0-45-generic", expected_vbios="96.00.99.00.01")
    assert verdict.status == FAIL
    assert verdict.reason.startswith(
        "kernel 5.15.0-122-generic, expected 6.8.0-45-generic; GPU 0: VBIOS 96.00.89.00.01"
    )


def test_it_errors_when_a_fact_is_missing() -> None:
    stdout = facts_stdout().replace("5.15.0-122-generic\n\n@@kiln-rc 0", "\n@@kiln-rc 1")
    doc = probe_doc(gpus=[gpu_doc(i) if i != 2 else gpu_doc(i, vbios_version=None) for i in range(8)])
    _, verdict = judge(doc, stdout, stderr="uname: cannot get system name\n")
    assert verdict.status == ERROR
    assert "kernel unavailable (uname exited 1: uname: cannot get system name)" in verdict.reason
    assert "GPU 2: VBIOS unavailable" in verdict.reason


def test_it_passes_without_ibstat_unless_nic_firmware_is_pinned() -> None:
    measurements, verdict = judge(stdout=facts_stdout(ibstat=None))
    assert verdict.status == PASS
    assert by(measurements, "nic_firmware")[0].labels["missing"] == "ibstat not installed"
    _, verdict = judge(stdout=facts_stdout(ibstat=None), expected_nic_firmware="28.39.1002")
    assert (verdict.status, verdict.reason) == (ERROR, "NIC firmware unavailable (ibstat not installed)")


def test_it_splits_sections_and_notices_one_cut_short() -> None:
    sections = split_sections("@@kiln-section kernel\n6.8.0\n\n@@kiln-rc 0\n@@kiln-section os_release\nNAME=x\n")
    assert sections == {"kernel": ("6.8.0\n", 0), "os_release": ("NAME=x", None)}


def node_facts(kernel: str = "6.8.0-45", vbios: str = "96.00.89.00.01", nic: str = "28.39.1002") -> list[Measurement]:
    return [
        Measurement(name="kernel", text=kernel),
        Measurement(name="os", text="Ubuntu 22.04.4 LTS"),
        Measurement(name="driver_version", text="550.54.15"),
        *[Measurement(name="vbios", text=vbios, gpu=i) for i in range(8)],
        Measurement(name="nic_firmware", text=nic, labels={"ca": "mlx5_0", "ca_type": "MT4129"}),
    ]


def test_it_names_the_odd_kernel_among_twelve_nodes() -> None:
    per_node = {f"gpu{i:02d}": node_facts() for i in range(12)}
    per_node["gpu07"] = node_facts(kernel="6.5.0-1")
    assert SoftwareConsistency.consensus(per_node) == {"gpu07": "kernel 6.5.0-1 differs from 11 of 12 nodes (6.8.0-45)"}


def test_it_compares_vbios_and_nic_firmware_as_sets() -> None:
    per_node = {f"n{i}": node_facts() for i in range(3)}
    mixed = node_facts()
    mixed[3].text = "96.00.74.00.01"  # one GPU of n2 on another VBIOS
    per_node["n2"] = mixed
    per_node["n1"] = node_facts(nic="28.41.1000")
    assert SoftwareConsistency.consensus(per_node) == {
        "n2": "VBIOS 96.00.74.00.01, 96.00.89.00.01 differs from 2 of 3 nodes (96.00.89.00.01)",
        "n1": "NIC firmware MT4129 28.41.1000 differs from 2 of 3 nodes (MT4129 28.39.1002)",
    }


def test_it_flags_nothing_without_a_strict_majority() -> None:
    per_node = {"a": node_facts(kernel="1"), "b": node_facts(kernel="2"), "c": node_facts(kernel="3")}
    assert SoftwareConsistency.consensus(per_node) == {}
    assert SoftwareConsistency.consensus({"a": node_facts(kernel="1"), "b": node_facts(kernel="2")}) == {}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):
    from testbed.sim import build_simulator

    return build_simulator(tmp_path_factory.mktemp("sim"))


def test_it_flags_the_simulated_node_with_the_odd_kernel(sim, tmp_path: Path) -> None:
    from testbed.sim import node_env, write_state
    from worker.ssh import LocalTransport, NodeTarget

    pytest.importorskip("pynvml")
    check = get_check("sw_consistency")
    per_node = {}
    for i in range(4):
        host = f"gpu0{i}"
        state = tmp_path / host / "state"
        write_state(state, node=host, kernel="6.5.0-1-generic" if i == 2 else "6.8.0-45-generic")
        transport = LocalTransport(NodeTarget(hostname=host, transport="local", local_env=node_env(sim, state)))
        node = NodeContext(hostname=host)
        outputs = [transport.run(c) for c in check.commands(check.make_params(None), node)]
        measurements, verdict = run_check(
            check, None, resolve_thresholds("sw_consistency", "H100-SXM-8"), outputs, node
        )
        assert verdict.status == PASS, verdict.reason
        per_node[host] = measurements
    assert by(per_node["gpu02"], "kernel")[0].text == "6.5.0-1-generic"
    assert len(by(per_node["gpu00"], "nic_firmware")) == 9  # 8 compute CAs + the front-end port
    assert SoftwareConsistency.consensus(per_node) == {
        "gpu02": "kernel 6.5.0-1-generic differs from 3 of 4 nodes (6.8.0-45-generic)"
    }
    # Closing a run reads only consensus_names: the same verdict from those rows alone.
    names = SoftwareConsistency.consensus_names or frozenset()
    kept = {host: [m for m in ms if m.name in names] for host, ms in per_node.items()}
    assert SoftwareConsistency.consensus(kept) == SoftwareConsistency.consensus(per_node)
    assert all(len(kept[h]) < len(per_node[h]) for h in per_node)


@pytest.mark.parametrize("cut_at", ["@@kiln-section ibstat", "@@kiln-rc 0\n@@kiln-section ibstat", "CA 'mlx5_3'"])
def test_it_errors_when_the_facts_output_was_cut_short(cut_at: str) -> None:
    # Every section ends with "@@kiln-rc N"; before this, a cut ibstat section passed without NIC firmware.
    stdout = facts_stdout()
    measurements, verdict = judge(stdout=stdout[: stdout.index(cut_at)])
    assert verdict.status == ERROR
    assert verdict.reason.startswith(f"{FACTS_LABEL} output incomplete: section ")
    assert measurements == []


def test_it_errors_on_a_garbled_ibstat_section_that_exited_0() -> None:
    garbled = IBSTAT.replace("Port 1:", "Port inf:", 1)
    _, verdict = judge(stdout=facts_stdout(ibstat=garbled))
    assert verdict.status == ERROR
    assert verdict.reason.startswith("ibstat section: ")
