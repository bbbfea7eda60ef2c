"""Which check judges a raw tool output, and how that output becomes the check's command output.

`python -m checks judge KIND FILE` accepts every parser kind (checks/core/parsers.py). A parser kind
names a tool's output; the check that consumes that tool is found here, with the command label
its `parse` looks for. Where Kiln runs the tool inside a wrapper (gpu_burn under the sampling
probe, dmesg/journalctl under the kernel-log script), the raw output is placed in the wrapper's
document exactly as the wrapper would have carried it, and nothing else is made up: no telemetry
samples, no probe document. A check that needs more evidence than the one output then says so
through its own no-evidence rules (`error`; `fail` when the output alone proves a fault, the
missing evidence named in its reason); it never passes on what is missing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from checks.core.base import Command, CommandOutput
from checks.core.probe_check import PROBE_LABEL
from checks.core.sampling import SAMPLING_LABEL, SAMPLING_SCHEMA
from checks.fs.metadata import MDTEST_LABEL
from checks.fs.throughput import FIO_LABEL
from checks.gpu.config import CMDLINE_LABEL, LSPCI_LABEL, QUERY_LABEL
from checks.gpu.dcgm import DCGMI_LABEL
from checks.gpu.host_bw import ALLOWED_TESTS, NVBW_LABEL
from checks.gpu.links import NVLINK_LABEL
from checks.gpu.xid import KERNEL_LOG_LABEL, KERNEL_LOG_MARK
from checks.nccl.allreduce import NCCL_LABEL
from checks.power.readings import POWER_KINDS
from checks.rdma.bw import PAIRS_LABEL as PERFTEST_LABEL
from checks.software.slurm_container import STEP_LABEL
from checks.software.stack import STACK_LABEL
from checks.thermal.check import SENSORS
from checks.topology.check import TOPO_LABEL

IBSTAT_LABEL = "ibstat"  # checks/rdma/infiniband.py IbPorts.commands
FRU_LABEL = "bmc fru"  # checks/gpu/bmc_fru.py fru_command (GpuInventory.commands)
SENSORS_REDFISH_LABEL = SENSORS + " redfish"  # checks/thermal/check.py DlcTemperature.commands


@dataclass(frozen=True)
class RawJudge:
    """How a parser kind's output is judged: by `check`, as `build(text)`; `note` says what the
    check needs beyond this output (empty when the output is all it reads)."""

    check: str
    build: Callable[[str], list[CommandOutput]]
    note: str = ""


def _output(label: str, stdout: str, argv: tuple[str, ...] = ("file",)) -> CommandOutput:
    return CommandOutput(command=Command(argv=argv, timeout=0, label=label), stdout=stdout, stderr="", exit_code=0)


def _labelled(label: str) -> Callable[[str], list[CommandOutput]]:
    return lambda text: [_output(label, text)]


def _gpu_burn(text: str) -> list[CommandOutput]:
    """gpu_burn's stdout as the sampling probe carries it (its `child`), with no samples: the probe
    document a burn-in run would have produced had NVML given no telemetry at all."""
    doc = {
        "schema": SAMPLING_SCHEMA,
        "mode": "sample",
        "errors": ["no telemetry: judged from a gpu_burn output file alone"],
        "samples": {"t": [], "gpus": []},
        "before": None,
        "after": None,
        "child": {"argv": ["gpu_burn"], "exit_code": 0, "stdout": text, "stderr": "", "duration_s": None},
    }
    return [_output(SAMPLING_LABEL, json.dumps(doc))]


def _kernel_log(text: str) -> list[CommandOutput]:
    """A kernel log as the kernel-log script prints it (checks/gpu/xid.py): the reader's output, then
    its end marker. The since-epoch argument is empty: every event in the file counts."""
    body = text if text.endswith("\n") else text + "\n"
    marked = body + f"\n{KERNEL_LOG_MARK} source=dmesg rc=0\n"
    return [_output(KERNEL_LOG_LABEL, marked, argv=("sh", "-c", "kernel-log", "sh", ""))]


def _nvbandwidth(text: str) -> list[CommandOutput]:
    """nvbandwidth's output as host_bw's command carries it; its argv asks for the copy tests the
    file ran (none of them: host_bw's default three, whose absence it then names)."""
    ran = [test for test in ALLOWED_TESTS if f"Running {test}." in text]
    argv = ("nvbandwidth", *(arg for test in ran for arg in ("-t", test)))
    return [_output(NVBW_LABEL, text, argv=argv)]


def _fio(text: str) -> list[CommandOutput]:
    return [_output(FIO_LABEL, text)]


def _srun_step(text: str) -> list[CommandOutput]:
    """What srun printed for a --container-image step, on stderr where srun writes it, exit 1."""
    step = Command(argv=("srun", "--container-image=file"), timeout=0, label=STEP_LABEL)
    return [CommandOutput(command=step, stdout="", stderr=text, exit_code=1)]


_STACK_NOTE = "sw_consistency reads the probe, the kernel and os-release, and every stack component together"


RAW_JUDGES: dict[str, RawJudge] = {
    "nccl": RawJudge("nccl_allreduce", _labelled(NCCL_LABEL)),
    "gpu_burn": RawJudge(
        "burn_in", _gpu_burn, "burn_in also judges NVML telemetry sampled during the burn; a gpu_burn file has none"
    ),
    "dcgmi_diag": RawJudge("dcgm_diag", _labelled(DCGMI_LABEL)),
    "ibstat": RawJudge("ib_ports", _labelled(IBSTAT_LABEL)),
    "ipmitool_fru": RawJudge(
        "gpu_inventory", _labelled(FRU_LABEL), "gpu_inventory judges the probe; the FRU listing is recorded, not judged"
    ),
    "fio": RawJudge("fs_throughput", _fio),
    "ior": RawJudge("fs_throughput", _fio, "fs_throughput judges fio JSON; IOR output is parsed, not judged"),
    "elbencho": RawJudge("fs_throughput", _fio, "fs_throughput judges fio JSON; elbencho output is parsed, not judged"),
    "mdtest": RawJudge("fs_metadata", _labelled(MDTEST_LABEL)),
    "dmesg": RawJudge(
        "ecc_health", _kernel_log, "ecc_health judges the probe's ECC counters with the kernel log; a log has none"
    ),
    "nvbandwidth": RawJudge("host_bw", _nvbandwidth),
    "nvlink_status": RawJudge(
        "gpu_links", _labelled(NVLINK_LABEL), "gpu_links also needs the probe's PCIe and NVLink facts"
    ),
    "nvidia_smi_topo": RawJudge("topology", _labelled(TOPO_LABEL)),
    "nvsmi_page_retirement": RawJudge(
        "ecc_health", _labelled(PROBE_LABEL), "ecc_health reads page retirement from the probe JSON, not this text"
    ),
    "ipmitool_sdr": RawJudge(
        "dlc_temperature",
        _labelled(SENSORS),
        "dlc_temperature also needs the probe's idle and load GPU temperature sampling",
    ),
    "redfish_thermal": RawJudge(
        "dlc_temperature",
        _labelled(SENSORS_REDFISH_LABEL),
        "dlc_temperature also needs the probe's idle and load GPU temperature sampling",
    ),
    "nvidia_smi_q": RawJudge(
        "gpu_config", _labelled(QUERY_LABEL), "gpu_config also needs the kernel command line (and lspci, systemctl)"
    ),
    "nvidia_smi_fabric": RawJudge(
        "gpu_config", _labelled(QUERY_LABEL), "gpu_config reads the whole nvidia-smi -q, the kernel command line, lspci"
    ),
    "lspci_acs": RawJudge(
        "gpu_config", _labelled(LSPCI_LABEL), "gpu_config also needs nvidia-smi -q and the kernel command line"
    ),
    "kernel_cmdline": RawJudge(
        "gpu_config", _labelled(CMDLINE_LABEL), "gpu_config also needs nvidia-smi -q (and lspci)"
    ),
    "perftest": RawJudge(
        "rdma_bw",
        _labelled(PERFTEST_LABEL),
        "rdma_bw judges both ends of every pair on every rail of the run; one perftest output is parsed, not judged",
    ),
    "fabricmanager_log": RawJudge(
        "gpu_config",
        _labelled("fabricmanager.log"),
        "gpu_config does not read the fabric manager log: parsed, not judged",
    ),
    "ofed_info": RawJudge("sw_consistency", _labelled(STACK_LABEL), _STACK_NOTE),
    "ucx_info": RawJudge("sw_consistency", _labelled(STACK_LABEL), _STACK_NOTE),
    "enroot_version": RawJudge("sw_consistency", _labelled(STACK_LABEL), _STACK_NOTE),
    "slurm_version": RawJudge("sw_consistency", _labelled(STACK_LABEL), _STACK_NOTE),
    "srun_container": RawJudge(
        "slurm_container", _srun_step, "slurm_container also compares with the host's nvidia-smi GPU table"
    ),
}


# One power or cooling reading is parsed, never judged alone: the heat soak judges 1 Hz series of every
# node, PDU and CDU together (checks/soak/check.py), so `judge` says so (`error`) and shows the parse.
_SOAK_NOTE = "power_soak judges 1 Hz readings of every node, PDU phase and loop over a whole-cluster soak"
RAW_JUDGES.update({kind: RawJudge("power_soak", _labelled(kind), _SOAK_NOTE) for kind in POWER_KINDS})


def fio_check(text: str) -> str:
    """fs_aggregate for a fio client-mode document (`client_stats`), else fs_throughput."""
    return "fs_aggregate" if '"client_stats"' in text else "fs_throughput"
