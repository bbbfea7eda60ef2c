"""sw_consistency's software stack: NCCL, MLNX_OFED/DOCA-OFED, UCX, Enroot, Pyxis, Slurm versions,
read on real outputs and on the simulator, pinned, and compared across nodes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from checks import get_check, run_check
from checks.core.base import ERROR, FAIL, PASS, Measurement, NodeContext
from checks.core.parsers import parse_output
from checks.core.profiles import resolve_thresholds
from checks.software.consistency import SoftwareConsistency
from checks.software.stack import STACK_LABEL, STACK_NAMES, read_nccl, read_ofed, read_pyxis, read_ucx
from tests.checks.test_software import judge, stack_stdout

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def by(measurements: list[Measurement], name: str) -> Measurement:
    return next(m for m in measurements if m.name == name)


@pytest.mark.parametrize(
    ("kind", "relative", "text", "version"),
    [
        (
            "ofed_info",
            "ofed_info/ofed_info_s_mlnx_ofed_23.07_daocloud.txt",
            "MLNX_OFED_LINUX-23.07-0.5.1.2",
            "23.07-0.5.1.2",
        ),
        (
            "ofed_info",
            "ofed_info/ofed_info_s_doca_ofed_24.07_lshca102.txt",
            "OFED-internal-24.07-0.3.5.0.110",
            "24.07-0.3.5.0.110",
        ),
        ("ucx_info", "ucx_info/ucx_info_v_1.12.0_uct_format_ucx7465.txt", "1.12.0", "1.12.0"),
        ("ucx_info", "ucx_info/ucx_info_v_1.13.0_ucx8402.txt", "1.13.0", "1.13.0"),
        ("ucx_info", "ucx_info/ucx_info_v_1.15.0_markdown_ucx9430.txt", "1.15.0", "1.15.0"),
        ("enroot_version", "enroot/enroot_version_3.5.0_enroot249.txt", "3.5.0", "3.5.0"),
        ("slurm_version", "slurm-version/srun_V_slurm-wlm_19.05.5_nemo73.txt", "19.05.5", "19.05.5"),
    ],
)
def test_it_reads_the_version_from_real_outputs(kind: str, relative: str, text: str, version: str) -> None:
    parsed = parse_output(kind, (FIXTURES / relative).read_text())
    (m,) = parsed.measurements
    assert (m.text, m.labels["version"]) == (text, version)


def test_it_names_the_rdma_stack_flavour() -> None:
    assert read_ofed("OFED-internal-24.07-0.3.5.0.110:\n").labels["flavour"] == "DOCA-OFED"
    assert read_ofed("MLNX_OFED_LINUX-23.07-0.5.1.2:\n").labels["flavour"] == "MLNX_OFED_LINUX"
    with pytest.raises(ValueError, match="not an ofed_info -s line"):
        read_ofed("ofed_info: unknown option\n")


def test_it_reads_nccl_as_the_loader_resolves_it() -> None:
    text = "/lib/libnccl.so.2 -> /lib/libnccl.so.2.21.5\n/opt/nccl/libnccl.so -> /opt/nccl/libnccl.so.2.19.3\n"
    assert read_nccl(text).text == "2.19.3, 2.21.5"  # two NCCLs on one node: both, as a set
    assert read_nccl("") is None  # no libnccl in the cache: not installed
    with pytest.raises(ValueError, match="names no NCCL version"):
        read_nccl("/lib/libnccl.so.2 -> /lib/libnccl.so.2\n")


def test_it_reads_pyxis_loaded_or_not() -> None:
    assert read_pyxis("  --container-image=IMAGE\npackage: 0.20.0-1\n").text == "0.20.0-1"
    assert read_pyxis("  --container-image=IMAGE\npackage: \n").text == "loaded (version unknown)"
    assert read_pyxis("package: 0.20.0-1\n").text == "not loaded"
    with pytest.raises(ValueError):
        read_ucx("ucx_info: error while loading shared libraries\n")


def test_it_records_a_missing_tool_as_absent_and_passes_unless_pinned() -> None:
    stack = stack_stdout(enroot=("", 127), ucx=("", 127))
    measurements, verdict = judge(stack=stack)
    assert verdict.status == PASS
    assert by(measurements, "enroot_version").labels["missing"] == "enroot not installed"
    assert "Enroot not installed" in verdict.reason
    _, verdict = judge(stack=stack, expected_enroot="3.4.1")
    assert (verdict.status, verdict.reason) == (ERROR, "Enroot version unavailable (enroot not installed)")


def test_it_errors_on_an_installed_tool_that_cannot_say_its_version() -> None:
    _, verdict = judge(stack=stack_stdout(ucx=("", 1)))
    assert verdict.status == ERROR
    assert verdict.reason == "UCX version unreadable (ucx_info exited 1)"
    _, verdict = judge(stack=stack_stdout(enroot=("enroot: line 3: syntax error\n", 0)))
    assert verdict.status == ERROR
    assert verdict.reason.startswith("Enroot version unreadable (not an enroot version: ")


def test_it_fails_a_component_off_its_pin() -> None:
    _, verdict = judge(expected_nccl="2.23.4", expected_ofed="23.10-1.1.9.0", expected_slurm="23.11.4")
    assert (verdict.status, verdict.reason) == (FAIL, "NCCL 2.21.5, expected 2.23.4")
    _, verdict = judge(stack=stack_stdout(pyxis=("package: 0.20.0-1\n", 0)), expected_pyxis="0.20.0-1")
    assert (verdict.status, verdict.reason) == (FAIL, "Pyxis not loaded, expected 0.20.0-1")


@pytest.mark.parametrize("cut_at", ["@@kiln-section pyxis", "package: 0.20.0-1"])
def test_it_errors_when_the_stack_output_was_cut_short(cut_at: str) -> None:
    stack = stack_stdout()
    measurements, verdict = judge(stack=stack[: stack.index(cut_at)])
    assert verdict.status == ERROR
    assert verdict.reason == f"{STACK_LABEL} output incomplete: section pyxis cut short (no '@@kiln-rc' line)"
    assert measurements == []


def stack_facts(**versions: str) -> list[Measurement]:
    base = {"nccl_lib_version": "2.21.5", "enroot_version": "3.4.1", "slurm_version": "23.11.4"}
    return [Measurement(name=name, text=text) for name, text in {**base, **versions}.items()]


def test_it_names_the_odd_node_and_component_across_the_cluster() -> None:
    per_node = {f"gpu{i:02d}": stack_facts() for i in range(6)}
    per_node["gpu03"] = stack_facts(enroot_version="3.4.0")
    per_node["gpu05"] = stack_facts(nccl_lib_version="")  # no libnccl: not installed, the odd one out too
    assert SoftwareConsistency.consensus(per_node) == {
        "gpu03": "Enroot 3.4.0 differs from 5 of 6 nodes (3.4.1)",
        "gpu05": "NCCL not installed differs from 5 of 6 nodes (2.21.5)",
    }


def test_it_does_not_compare_an_unreadable_version() -> None:
    per_node = {f"n{i}": stack_facts() for i in range(3)}
    per_node["n1"] = stack_facts(enroot_version="")
    per_node["n1"][1].labels["unreadable"] = "1"  # enroot exited 1: no version, not "not installed"
    assert SoftwareConsistency.consensus(per_node) == {}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):
    from testbed.sim import build_simulator

    return build_simulator(tmp_path_factory.mktemp("sim"))


def test_it_flags_the_simulated_node_with_a_skewed_stack(sim, tmp_path: Path) -> None:
    from testbed.sim import node_env, write_state
    from worker.ssh import LocalTransport, NodeTarget

    pytest.importorskip("pynvml")
    check = get_check("sw_consistency")
    per_node = {}
    for i in range(4):
        host = f"gpu0{i}"
        state = tmp_path / host / "state"
        skew = {"stack_version_skew": "enroot:3.4.0,ofed:23.07-0.5.1.2"} if i == 1 else {}
        write_state(state, node=host, **skew)
        transport = LocalTransport(NodeTarget(hostname=host, transport="local", local_env=node_env(sim, state)))
        node = NodeContext(hostname=host)
        outputs = [transport.run(c) for c in check.commands(check.make_params(None), node)]
        measurements, verdict = run_check(
            check, None, resolve_thresholds("sw_consistency", "H100-SXM-8"), outputs, node
        )
        assert verdict.status == PASS, verdict.reason
        per_node[host] = measurements
    assert {m.name: m.text for m in per_node["gpu00"] if m.name in STACK_NAMES} == {
        "nccl_lib_version": "2.21.5",
        "ofed_version": "MLNX_OFED_LINUX-23.10-1.1.9.0",
        "ucx_version": "1.16.0",
        "enroot_version": "3.4.1",
        "slurm_version": "23.11.4",
        "pyxis_version": "0.19.0-1",
    }
    assert SoftwareConsistency.consensus(per_node) == {
        "gpu01": "RDMA stack MLNX_OFED_LINUX-23.07-0.5.1.2 differs from 3 of 4 nodes (MLNX_OFED_LINUX-23.10-1.1.9.0); "
        "Enroot 3.4.0 differs from 3 of 4 nodes (3.4.1)"
    }
    names = SoftwareConsistency.consensus_names or frozenset()
    kept = {host: [m for m in ms if m.name in names] for host, ms in per_node.items()}
    assert SoftwareConsistency.consensus(kept) == SoftwareConsistency.consensus(per_node)


@pytest.mark.parametrize(
    ("tool", "argv", "skew", "expected"),
    [
        ("ofed_info", ["-s"], "ofed:OFED-internal-24.07-0.3.5.0.110", "OFED-internal-24.07-0.3.5.0.110:\n"),
        ("enroot", ["version"], "enroot:3.5.0", "3.5.0\n"),
        ("srun", ["--version"], "slurm:24.05.1", "slurm 24.05.1\n"),
        ("dpkg-query", ["-W", "-f=${Version}", "nvslurm-plugin-pyxis"], "pyxis:0.20.0-1", "0.20.0-1"),
    ],
)
def test_the_simulated_tools_print_the_skewed_version(sim, tmp_path: Path, tool, argv, skew, expected) -> None:
    state = tmp_path / "gpu01" / "state"
    state.parent.mkdir()
    state.write_text(f"node=gpu01\nstack_version_skew={skew}\n")
    env = {"PATH": os.environ["PATH"], "KILN_SIM_STATE": str(state)}
    result = subprocess.run([str(sim.bin_dir / tool), *argv], capture_output=True, text=True, env=env, check=False)
    assert (result.returncode, result.stdout) == (0, expected)
