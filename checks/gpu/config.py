"""gpu_config: how the node is configured for GPU work, each finding with what to do about it.

A node can pass every functional check and still run jobs slowly or not at all because of how it
is set up. Read-only evidence, four commands (argv only, nothing interpolated but a validated
unit name):
- `nvidia-smi -q` (checks/gpu/nvidia_smi_query.py): per GPU, persistence mode, MIG mode (current and
  pending), applications / default applications / max graphics clocks, the "Applications Clocks
  Setting" clocks event reason, and the NVSwitch fabric registration (Fabric State / Status);
- `systemctl show <fabric_manager_unit>` (checks/gpu/config_read.py), when the param names the
  unit (the NVSwitch profiles do): the fabric manager must be active;
- `lspci -D -nn -vvv` (checks/gpu/lspci.py), unless `check_acs` is off: ACS control on the PCIe
  bridges above the GPUs and NICs; it needs root to read capabilities;
- `cat /proc/cmdline`: the IOMMU mode the kernel was booted with.

Why each matters, and its source:
- persistence mode: without it the driver tears GPU state down when the last client exits and
  every job pays the initialisation again (NVIDIA Driver Persistence docs, "Persistence Daemon":
  recommended on all data-center GPUs);
- MIG: a GPU left partitioned gives a full-GPU job a slice (NVIDIA MIG user guide); a pending mode
  differing from the current one waits for a GPU reset;
- applications clocks below their default (`nvidia-smi -ac`, left over from a test) hold the GPU
  below its rated clocks; `nvidia-smi -rac` restores them (nvidia-smi(1), "-ac", "-rac"). The
  reference is the default applications clock, not the max: an A100 SXM4's default graphics
  applications clock is 1275 MHz of a 1410 MHz max (tests/fixtures/nvidia-smi A100 XML);
  locked clocks (`nvidia-smi -lgc`) show as the "Applications Clocks Setting" clocks event reason
  (NVML: nvmlClocksThrottleReasonUserDefinedClocks is that same bit);
- fabric: on NVSwitch systems a GPU is usable for CUDA only once the fabric manager has
  registered it: `nvidia-smi -q` Fabric State "Completed" with Status "Success" (NVIDIA Fabric
  Manager user guide; NVML nvmlGpuFabricInfo: the status is meaningful once the state is
  completed). A100 reports N/A there (fabric info is Hopper and later), so only the Hopper
  profiles require it;
- ACS and IOMMU: ACS on a PCIe switch port, or an IOMMU translating DMA, sends GPU-GPU and
  GPU-NIC peer-to-peer traffic through the CPU root complex: slower, or a hang (NCCL
  troubleshooting guide, "PCI Access Control Services (ACS)" and "IOMMU"; NVIDIA GPUDirect RDMA
  docs recommend the IOMMU off or in passthrough).

A fact that cannot be read (N/A, absent, an unreadable bridge) is an `error` naming the GPU or
bridge; nothing unread ever passes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    Check,
    Command,
    CommandOutput,
    EvidenceError,
    Measurement,
    NodeContext,
    ParamsError,
    Verdict,
    register,
)
from checks.core.evidence import COUNT, FLAG, Rule
from checks.core.presentation import Presentation
from checks.gpu.config_judge import judge
from checks.gpu.config_read import FM_PROPERTIES, IOMMU_MODES, read_cmdline, read_unit
from checks.gpu.lspci import read_acs
from checks.gpu.nvidia_smi_query import read_gpu_config

QUERY_LABEL = "nvidia-smi -q"
UNIT_LABEL = "systemctl show"
LSPCI_LABEL = "lspci -vvv"
CMDLINE_LABEL = "kernel cmdline"
# systemd unit names: letters, digits and ":-_.\@" (systemd.unit(5)); never an option.
_UNIT = re.compile(r"^[A-Za-z0-9:_.@\\][A-Za-z0-9:_.@\\-]{0,255}$")
# lspci reads config space from sysfs: well under a second on a 200-function server; systemctl and
# cat answer at once. Conservative defaults that still bound a wedged node; tune per site.
LSPCI_TIMEOUT_S = 30.0
UNIT_TIMEOUT_S = 15.0
CMDLINE_TIMEOUT_S = 10.0
ACS_SCOPES = ("switch", "path", "all")
MIG_EXPECTATIONS = ("disabled", "enabled", "any")


@dataclass
class GpuConfigParams:
    # nvidia-smi -q on 8 GPUs answers in seconds; 60 s bounds a slow driver (as the probe's budget,
    # checks/core/probe_check.ProbeParams; conservative default, tune per site).
    timeout_s: int = 60
    # The fabric manager's systemd unit; "" = not checked (no NVSwitch). Profiles set it.
    fabric_manager_unit: str = ""
    # Read ACS from lspci (needs root for the capabilities); off = not checked, and said so.
    check_acs: bool = True

    def __post_init__(self) -> None:
        if self.fabric_manager_unit and not _UNIT.match(self.fabric_manager_unit):
            raise ParamsError(f"param 'fabric_manager_unit': not a systemd unit name: {self.fabric_manager_unit!r}")
        if self.timeout_s <= 0:
            raise ParamsError(f"param 'timeout_s': must be > 0, got {self.timeout_s}")


@dataclass
class GpuConfigThresholds:
    # NVIDIA Driver Persistence docs: persistence (nvidia-persistenced) on for data-center GPUs.
    require_persistence: bool = True
    # "disabled" | "enabled" | "any": a full-GPU acceptance expects no MIG (the default).
    expected_mig: str = "disabled"
    # How far below its default the graphics applications clock may sit, MHz: one step of the
    # supported clocks, which are 15 MHz apart (nvidia-smi -q -x supported_graphics_clock 1410,
    # 1395, 1380 ... in tests/fixtures/nvidia-smi/nvsmi_q_x_A100-SXM4-80GB_MIG_drv535.xml).
    max_app_clock_deficit_mhz: float = 15.0
    # The "Applications Clocks Setting" clocks event reason active (clocks held by -ac or -lgc).
    fail_on_clock_setting: bool = True
    # Fabric State Completed / Status Success on every GPU (NVSwitch Hopper systems; profiles).
    require_fabric: bool = False
    # Which ACS-capable bridges are judged: "switch" = PCIe switch ports above a GPU or NIC
    # (NCCL troubleshooting: "If PCI switches have ACS enabled, it needs to be disabled"),
    # "path" = every bridge above a GPU or NIC (root ports too), "all" = every bridge.
    acs_scope: str = "switch"
    # Comma-separated IOMMU modes accepted (off, passthrough, translated, default): GPUDirect
    # RDMA and NCCL docs recommend the IOMMU off or in passthrough.
    allowed_iommu_modes: str = "off,passthrough"

    def __post_init__(self) -> None:
        if self.expected_mig not in MIG_EXPECTATIONS:
            raise ParamsError(
                f"threshold 'expected_mig': one of {', '.join(MIG_EXPECTATIONS)}, got {self.expected_mig!r}"
            )
        if self.acs_scope not in ACS_SCOPES:
            raise ParamsError(f"threshold 'acs_scope': one of {', '.join(ACS_SCOPES)}, got {self.acs_scope!r}")
        if not 0 <= self.max_app_clock_deficit_mhz <= 10_000:
            raise ParamsError(
                f"threshold 'max_app_clock_deficit_mhz': 0..10000 MHz, got {self.max_app_clock_deficit_mhz}"
            )
        modes = self.iommu_modes()
        unknown = sorted(set(modes) - set(IOMMU_MODES))
        if unknown or not modes:
            raise ParamsError(
                f"threshold 'allowed_iommu_modes': a comma list of {', '.join(IOMMU_MODES)}, "
                f"got {self.allowed_iommu_modes!r}"
            )

    def iommu_modes(self) -> list[str]:
        return [m.strip() for m in self.allowed_iommu_modes.split(",") if m.strip()]


@register
class GpuConfig(Check):
    key: ClassVar[str] = "gpu_config"
    name: ClassVar[str] = "GPU node configuration"
    description: ClassVar[str] = (
        "Persistence, MIG, application clocks, NVSwitch fabric and fabric manager, PCIe ACS off and IOMMU mode."
    )
    Params: ClassVar[type] = GpuConfigParams
    Thresholds: ClassVar[type] = GpuConfigThresholds
    evidence: ClassVar[dict[str, Rule]] = {
        "persistence_mode": FLAG,
        "clocks_event_app_setting": FLAG,
        "acs_enabled": FLAG,
        "pci_functions": COUNT,
    }
    profile_params: ClassVar[dict[str, dict[str, Any]]] = {
        # NVIDIA Fabric Manager user guide: NVSwitch systems (DGX/HGX A100, H100, H200) need the
        # fabric manager service, installed as the systemd unit nvidia-fabricmanager.
        "H100-SXM-8": {"fabric_manager_unit": "nvidia-fabricmanager"},
        "H200-SXM-8": {"fabric_manager_unit": "nvidia-fabricmanager"},
        "A100-SXM-8": {"fabric_manager_unit": "nvidia-fabricmanager"},
    }
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {
        # Hopper HGX: every GPU reports Fabric State Completed / Status Success once the fabric
        # manager registered it (tests/fixtures/nvidia-smi-fabric, 8x H100 on driver 535.161.08).
        # A100 reports N/A there (NVML fabric info is Hopper and later): not required.
        "H100-SXM-8": {"require_fabric": True},
        "H200-SXM-8": {"require_fabric": True},
    }
    presentation: ClassVar[Presentation] = Presentation(rank=65)

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        p: GpuConfigParams = params
        out = [Command(argv=("nvidia-smi", "-q"), timeout=float(p.timeout_s), label=QUERY_LABEL, read_only=True)]
        if p.fabric_manager_unit:
            props = tuple(f"--property={name}" for name in FM_PROPERTIES)
            argv = ("systemctl", "show", *props, "--", p.fabric_manager_unit)
            out.append(Command(argv=argv, timeout=UNIT_TIMEOUT_S, label=UNIT_LABEL, read_only=True))
        if p.check_acs:
            argv = ("lspci", "-D", "-nn", "-vvv")
            out.append(Command(argv=argv, timeout=LSPCI_TIMEOUT_S, label=LSPCI_LABEL, read_only=True))
        cmdline = Command(argv=("cat", "/proc/cmdline"), timeout=CMDLINE_TIMEOUT_S, label=CMDLINE_LABEL, read_only=True)
        return [*out, cmdline]

    def describe_failure(self, output: CommandOutput) -> str:
        said = [s.strip() for s in (output.stderr + "\n" + output.stdout).splitlines() if s.strip()]
        return said[0][:300] if said else "no output"

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        by_label = {o.command.label: o for o in outputs}
        query = by_label.get(QUERY_LABEL)
        if query is None:
            raise EvidenceError("no nvidia-smi -q output to judge")
        out = read_gpu_config(query.stdout)
        unit = by_label.get(UNIT_LABEL)
        if unit is not None:
            out.append(read_unit(unit.stdout, unit.command.argv[-1]))
        lspci = by_label.get(LSPCI_LABEL)
        if lspci is not None:
            out += read_acs(lspci.stdout)
        cmdline = by_label.get(CMDLINE_LABEL)
        if cmdline is None:
            raise EvidenceError("no /proc/cmdline output to judge")
        out.append(read_cmdline(cmdline.stdout))
        return out

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        return judge(measurements, thresholds)
