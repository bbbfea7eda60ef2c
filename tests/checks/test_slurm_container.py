"""slurm_container: srun + pyxis + enroot with the site image; GPUs, UUIDs, driver and NCCL inside."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from checks import get_check, run_check
from checks.core.base import ERROR, FAIL, PASS, CommandOutput, NodeContext, ParamsError
from checks.software.slurm_container import HOST_LABEL, REFUSED_LABEL, STEP_LABEL, srun_argv
from checks.software.slurm_container_read import check_image, parse_gpu_csv

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pyxis"
IMAGE = "nvcr.io#nvidia/pytorch:24.05-py3"
CHECK = get_check("slurm_container")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):
    from testbed.sim import build_simulator

    return build_simulator(tmp_path_factory.mktemp("sim"))


def on_sim(sim, root: Path, host: str = "gpu01", params: dict | None = None, **faults):
    """Run the check's commands on one simulated node: (outputs, (measurements, verdict))."""
    from testbed.sim import node_env, write_state
    from worker.ssh import LocalTransport, NodeTarget

    state = root / host / "state"
    write_state(state, node=host, **faults)
    transport = LocalTransport(NodeTarget(hostname=host, transport="local", local_env=node_env(sim, state)))
    node = NodeContext(hostname=host, expected_gpus=8, scheduler="slurm")
    p = CHECK.make_params({"image": IMAGE, **(params or {})})
    outputs = [transport.run(c) for c in CHECK.commands(p, node)]
    return outputs, run_check(CHECK, p, None, outputs, node)


def rejudge(outputs: list[CommandOutput], host: str = "gpu01", **step_changes):
    """Judge the outputs again, with the srun step's output changed."""
    changed = [replace(o, **step_changes) if o.command.label == STEP_LABEL else o for o in outputs]
    node = NodeContext(hostname=host, expected_gpus=8, scheduler="slurm")
    return run_check(CHECK, {"image": IMAGE}, None, changed, node)


def test_it_passes_a_healthy_simulated_node(sim, tmp_path: Path) -> None:
    outputs, (measurements, verdict) = on_sim(sim, tmp_path)
    assert verdict.status == PASS, verdict.reason
    assert verdict.reason.startswith(f"gpu01: 8 GPUs and driver 550.54.15 as on the host, inside {IMAGE}; NCCL busbw ")
    assert verdict.reason.endswith(" GB/s at 64 MiB, #wrong 0")
    judged = {m.name: m.threshold for m in measurements if m.ok}
    assert judged == {
        "container_gpus": "== 8",
        "container_driver": "== 550.54.15",
        "wrong": "<= 0",
        "busbw_peak": "> 0",
    }
    step = next(o for o in outputs if o.command.label == STEP_LABEL).command
    assert f"--container-image={IMAGE}" in step.argv  # one argv element, never split or quoted
    assert "--nodelist=gpu01" in step.argv and "--gpus-per-node=8" in step.argv


def test_it_fails_a_pull_and_quotes_pyxis_and_enroot(sim, tmp_path: Path) -> None:
    _, (_, verdict) = on_sim(sim, tmp_path, container_pull_fail=1)
    assert verdict.status == FAIL
    assert verdict.reason == (
        f"gpu01: the container image cannot be pulled: pyxis: failed to import docker image: {IMAGE}; "
        "enroot: [ERROR] URL https://nvcr.io/v2/nvidia/pytorch/manifests/24.05-py3 returned error code: 404 Not Found"
    )


def test_a_registry_outage_is_an_error_not_a_node_failure(sim, tmp_path: Path) -> None:
    _, (measurements, verdict) = on_sim(sim, tmp_path, container_pull_fail=503)
    assert verdict.status == ERROR
    assert verdict.reason.startswith("the registry is unavailable, the image was not pulled (pyxis: failed to import")
    assert "returned error code: 503 Service Unavailable): the node was not tested" in verdict.reason
    assert measurements == []


def test_it_fails_a_container_short_of_gpus_naming_the_node(sim, tmp_path: Path) -> None:
    # all_reduce_perf -g 8 then fails inside (invalid device ordinal): the GPU count is the verdict.
    _, (_, verdict) = on_sim(sim, tmp_path, host="gpu07", container_gpus=6)
    assert verdict.status == FAIL
    assert verdict.reason.startswith("gpu07: the container sees 6 of 8 GPUs; not visible: GPU-")
    assert any(f.status == "warn" and "invalid device ordinal" in f.reason for f in verdict.findings)


def test_it_fails_another_driver_inside_the_container(sim, tmp_path: Path) -> None:
    _, (_, verdict) = on_sim(sim, tmp_path, container_driver="535.183.01")
    assert (verdict.status, verdict.reason) == (
        FAIL,
        "gpu01: driver 535.183.01 inside the container, 550.54.15 on the host",
    )


def test_it_fails_when_pyxis_is_not_loaded(sim, tmp_path: Path) -> None:
    _, (_, verdict) = on_sim(sim, tmp_path, pyxis_absent=1)
    assert verdict.status == FAIL
    assert verdict.reason == (
        "gpu01: pyxis is not loaded: srun does not know --container-image "
        f"(srun: unrecognized option '--container-image={IMAGE}')"
    )


def test_it_fails_wrong_nccl_results_inside_the_container(sim, tmp_path: Path) -> None:
    _, (_, verdict) = on_sim(sim, tmp_path, nccl_wrong=3)  # the simulator's wrong values start at 64 MiB
    assert (verdict.status, verdict.reason) == (FAIL, "gpu01: NCCL inside the container: #wrong = 6")


@pytest.mark.parametrize(
    ("cut", "reason"),
    [
        ("# Out of bounds values", "gpu01: output incomplete: no closing summary"),
        ("#       size", "container output incomplete: section nccl missing or cut short"),
    ],
)
def test_it_errors_on_truncated_nccl_output(sim, tmp_path: Path, cut: str, reason: str) -> None:
    outputs, _ = on_sim(sim, tmp_path)
    stdout = next(o for o in outputs if o.command.label == STEP_LABEL).stdout
    if cut.startswith("# Out"):  # the footer lines gone, the section still closed: the run stopped early
        lines = [line for line in stdout.splitlines() if not line.startswith(("# Out of bounds", "# Avg bus"))]
        truncated = "\n".join(lines) + "\n"
    else:  # the output itself cut inside the table
        truncated = stdout[: stdout.index(cut) + 40]
    _, verdict = rejudge(outputs, stdout=truncated)
    assert verdict.status == ERROR
    assert verdict.reason.startswith(reason)


def test_it_errors_when_a_size_of_the_sweep_has_no_row(sim, tmp_path: Path) -> None:
    outputs, _ = on_sim(sim, tmp_path)
    stdout = next(o for o in outputs if o.command.label == STEP_LABEL).stdout
    dropped = "\n".join(line for line in stdout.splitlines() if not line.strip().startswith("67108864 ")) + "\n"
    _, verdict = rejudge(outputs, stdout=dropped)
    assert (verdict.status, verdict.reason) == (ERROR, "gpu01: NCCL inside the container: no result row for 64 MiB")


@pytest.mark.parametrize(
    "image",
    [
        "nvcr.io#nvidia/pytorch:24.05-py3; rm -rf /",
        "$(id)",
        "ubuntu`id`",
        "ubuntu:22.04 --container-mounts=/:/host",
        "--container-mounts=/:/host",
        "-ubuntu",
        "ubuntu|sh",
        "a" * 513,
        "ubuntu\n",
    ],
)
def test_it_refuses_an_unsafe_image_param(image: str) -> None:
    with pytest.raises(ParamsError, match="param 'image'"):
        CHECK.make_params({"image": image})


@pytest.mark.parametrize(
    "image",
    [IMAGE, "nvcr.io/nvidia/pytorch:24.05-py3", "user@nvcr.io#nvidia/pytorch@sha256:" + "a" * 64, "/shared/pt.sqsh"],
)
def test_it_accepts_enroot_uris_and_squashfs_paths(image: str) -> None:
    check_image(image)


@pytest.mark.parametrize("param", [{"partition": "gpu;id"}, {"account": "-x"}, {"nccl_binary": "-h"}, {"gpus": 0}])
def test_it_refuses_other_unsafe_params(param: dict) -> None:
    with pytest.raises(ParamsError):
        CHECK.make_params({"image": IMAGE, **param})


@pytest.mark.parametrize(
    ("node", "params", "reason"),
    [
        (
            NodeContext(hostname="gpu01", scheduler="k8s"),
            {"image": IMAGE},
            "the cluster's scheduler is 'k8s', not Slurm",
        ),
        (NodeContext(hostname="gpu01", scheduler="slurm"), {}, "no container image set: param 'image'"),
        (NodeContext(hostname="-gpu01", scheduler="slurm"), {"image": IMAGE}, "hostname '-gpu01' cannot be passed"),
    ],
)
def test_it_errors_without_running_srun_where_it_does_not_apply(node, params, reason) -> None:
    p = CHECK.make_params(params)
    commands = CHECK.commands(p, node)
    assert [c.label for c in commands] == [REFUSED_LABEL]
    assert "srun" not in commands[0].argv
    output = CommandOutput(commands[0], "", commands[0].argv[-1] + "\n", 64)
    _, verdict = run_check(CHECK, p, None, [output], node)
    assert verdict.status == ERROR
    assert verdict.reason.startswith(reason)


def test_it_uses_the_clusters_slurm_node_name() -> None:
    node = NodeContext(hostname="gpu01.example.org", settings={"slurm_node_names": {"gpu01.example.org": "gpu01"}})
    argv = srun_argv(CHECK.make_params({"image": IMAGE, "partition": "batch", "request_gpus": False}), node)
    assert "--nodelist=gpu01" in argv and "--partition=batch" in argv
    assert not any(a.startswith("--gpus-per-node") for a in argv)


HOST_CSV = "".join(f"{i}, GPU-{i:08x}-0000-0000-0000-00000000000{i}, 550.54.15\n" for i in range(8))


def judged(step_stdout: str, step_stderr: str = "", rc: int = 0, host: str = HOST_CSV):
    node = NodeContext(hostname="gpu01", expected_gpus=8, scheduler="slurm")
    p = CHECK.make_params({"image": IMAGE, "nccl_test": False})
    host_cmd, step_cmd = CHECK.commands(p, node)
    outputs = [CommandOutput(host_cmd, host, "", 0), CommandOutput(step_cmd, step_stdout, step_stderr, rc)]
    return run_check(CHECK, p, None, outputs, node)


def gpus_section(text: str, rc: int = 0) -> str:
    return f"@@kiln-section gpus\n{text}\n@@kiln-rc {rc}\n"


def test_it_fails_a_gpu_the_node_does_not_list() -> None:
    inside = HOST_CSV.replace("GPU-00000007-0000-0000-0000-000000000007", "GPU-deadbeef-0000-0000-0000-000000000007")
    _, verdict = judged(gpus_section(inside))
    assert verdict.status == FAIL
    assert verdict.reason == (
        "gpu01: GPU GPU-deadbeef-0000-0000-0000-000000000007 in the container is not one the node lists outside it"
    )


def test_it_fails_a_container_where_nvml_cannot_start() -> None:
    _, verdict = judged(gpus_section("Failed to initialize NVML: Driver/library version mismatch", 9))
    assert verdict.status == FAIL
    assert verdict.reason.startswith(
        "gpu01: the container sees 0 of 8 GPUs (Failed to initialize NVML: Driver/library version mismatch)"
    )


def test_it_errors_when_the_image_has_no_nvidia_smi() -> None:
    _, verdict = judged(gpus_section("", 127), "sh: 1: nvidia-smi: not found\n")
    assert verdict.status == ERROR
    assert verdict.reason.startswith("nvidia-smi not found inside the container")


@pytest.mark.parametrize(
    ("stderr", "rc", "reason"),
    [
        ("bash: srun: command not found\n", 127, "srun not found on the node"),
        (
            "srun: error: Unable to allocate resources: Invalid partition name specified\n",
            1,
            "srun could not run the step: Unable to allocate resources: Invalid partition name specified",
        ),
        (
            "srun: error: Unable to allocate resources: Unable to contact slurm controller (connect failure)\n",
            1,
            "srun could not run the step: Unable to allocate resources: Unable to contact slurm controller",
        ),
    ],
)
def test_it_errors_when_srun_cannot_run_at_all(stderr: str, rc: int, reason: str) -> None:
    measurements, verdict = judged("", stderr, rc)
    assert (verdict.status, measurements) == (ERROR, [])
    assert verdict.reason.startswith(reason)


def test_it_errors_when_nvidia_smi_fails_on_the_host() -> None:
    node = NodeContext(hostname="gpu01", expected_gpus=8, scheduler="slurm")
    p = CHECK.make_params({"image": IMAGE})
    host_cmd, step_cmd = CHECK.commands(p, node)
    outputs = [
        CommandOutput(
            host_cmd, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", 9
        ),
        CommandOutput(step_cmd, gpus_section(HOST_CSV), "", 0),
    ]
    _, verdict = run_check(CHECK, p, None, outputs, node)
    assert verdict.status == ERROR
    assert verdict.reason.startswith("nvidia-smi on the host exited 9: NVIDIA-SMI has failed")


@pytest.mark.parametrize(
    ("name", "status", "reason"),
    [
        (
            "srun_pyxis_import_failure_400_pyxis118.txt",
            FAIL,
            "gpu01: the container image cannot be pulled: pyxis: failed to import docker image; enroot: [ERROR] URL "
            "http://master:5000/v2/custom-pytorch-3-1/manifests/latest returned error code: 400 Bad Request",
        ),
        (
            "srun_pyxis_container_start_failure_pyxis37.txt",
            FAIL,
            "gpu01: the container could not start: pyxis: container start failed with error code: 1; enroot: "
            "enroot-nsenter: failed to create user namespace: Permission denied",
        ),
        (
            "srun_pyxis_not_loaded_nemo73.txt",
            FAIL,
            "gpu01: pyxis is not loaded: srun does not know --container-image (srun: unrecognized option "
            "'--container-image')",
        ),
    ],
)
def test_it_judges_real_pyxis_failures(name: str, status: str, reason: str) -> None:
    _, verdict = judged("", (FIXTURES / name).read_text(), 1)
    assert (verdict.status, verdict.reason) == (status, reason)


def test_it_reads_the_gpu_table_strictly() -> None:
    assert [r.index for r in parse_gpu_csv("index, uuid, driver_version\n" + HOST_CSV)] == list(range(8))
    assert parse_gpu_csv("No devices were found\n") == []
    for bad in ("0, GPU-1, 550.54.15", "0, GPU-00000000-0000-0000-0000-000000000000, N/A", HOST_CSV + HOST_CSV):
        with pytest.raises(Exception, match="nvidia-smi"):
            parse_gpu_csv(bad)


def test_the_simulated_srun_prints_pyxis_import_failure(sim, tmp_path: Path) -> None:
    """The fake srun, run directly: pyxis 0.24's wording, exit 1 (NVIDIA/pyxis pyxis_slurmstepd.c)."""
    for host, fault in (("gpu01", "container_pull_fail=401"), ("gpu02", "")):
        (tmp_path / host).mkdir()
        (tmp_path / host / "state").write_text(f"node={host}\n{fault}\n")
    env = {"PATH": f"{sim.bin_dir}:{os.environ['PATH']}", "KILN_SIM_STATE": str(tmp_path / "gpu02" / "state")}
    argv = [str(sim.bin_dir / "srun"), "-N1", "-w", "gpu01", "--container-image=ubuntu:22.04", "true"]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines()[2:4] == [
        "slurmstepd: error: pyxis: failed to import docker image: ubuntu:22.04",
        "slurmstepd: error: pyxis: printing enroot log file:",
    ]
    assert (
        "slurmstepd: error: pyxis:     [ERROR] URL https://registry-1.docker.io/v2/library/ubuntu/manifests/22.04 "
        "returned error code: 401 Unauthorized"
    ) in result.stderr.splitlines()
    ok = subprocess.run([*argv[:3], "gpu02", *argv[4:]], capture_output=True, text=True, env=env, check=False)
    assert (ok.returncode, ok.stderr) == (0, "")


def test_the_timeout_of_a_hung_step_is_an_error() -> None:
    node = NodeContext(hostname="gpu01", expected_gpus=8, scheduler="slurm")
    p = CHECK.make_params({"image": IMAGE})
    host_cmd, step_cmd = CHECK.commands(p, node)
    outputs = [CommandOutput(host_cmd, HOST_CSV, "", 0), CommandOutput(step_cmd, "", "", None, timed_out=True)]
    _, verdict = run_check(CHECK, p, None, outputs, node)
    assert (verdict.status, verdict.reason) == (ERROR, f"{STEP_LABEL} timed out after 900s")
    assert HOST_LABEL == host_cmd.label and host_cmd.read_only and not step_cmd.read_only


def test_it_is_in_the_catalog() -> None:
    from checks.core.base import REGISTRY, by_slug, catalogued

    assert by_slug("slurm-container") is REGISTRY["slurm_container"] in catalogued()
