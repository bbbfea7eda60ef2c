"""gpu_inventory: how many GPUs, which models, which driver, and who they are.

Evidence is the probe JSON, and the node's DMI identity (/sys/class/dmi/id, read like
any node file: checks/core/node_files.py). The identities recorded here (each GPU's UUID,
serial, PCI bus id and VBIOS; the system, board and chassis serials; the power supplies' serials
from the BMC's FRU inventory, checks/gpu/bmc_fru.py) are what a certificate
later names and `kiln verify --against` reads again. A DMI serial that cannot be read (the
kernel makes product_serial readable by root only) or that is a firmware placeholder is
recorded as not reported, with the reason; it is never judged.

Expected GPU count: the node's own `expected_gpus` (NodeContext) when set,
since it is the most specific record; otherwise the `expected_gpu_count`
threshold (from the hardware profile or an override); when both are None,
any non-zero count passes.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    Command,
    CommandOutput,
    EvidenceError,
    Finding,
    Measurement,
    NodeContext,
    ParamsError,
    Verdict,
    register,
)
from checks.core.node_files import read_files, read_files_command
from checks.core.presentation import GPU_MISSING, REINSTALL_DRIVER, HardwareIdentity, Presentation, Remedy
from checks.core.probe_check import Facts, Probe, ProbeCheck, ProbeParams, gpu_list
from checks.gpu.bmc_fru import FRU_LABEL, fru_command, psu_measurements

_VERSION = re.compile(r"^\d+(\.\d+)*$")


def parse_version(text: str) -> tuple[int, ...] | None:
    """'550.54.15' -> (550, 54, 15); None when not a dotted number."""
    text = text.strip()
    return tuple(int(p) for p in text.split(".")) if _VERSION.match(text) else None


def split_models(text: str) -> tuple[str, ...]:
    return tuple(m.strip() for m in text.split(",") if m.strip())


DMI_DIR = "/sys/class/dmi/id"
DMI_LABEL = "dmi"
DMI_TIMEOUT_S = 10  # a few sysfs reads take milliseconds; this bounds a node whose /sys hangs
# DMI file -> the measurement that records it (SMBIOS type 1 system, type 2 board, type 3 chassis).
DMI_SERIALS = {"product_serial": "system_serial", "board_serial": "board_serial", "chassis_serial": "chassis_serial"}
# What firmware prints where no serial was programmed (SMBIOS leaves the string to the vendor; these
# are the usual AMI/OEM defaults): a placeholder names no part, so it is "not reported", never a serial.
DMI_PLACEHOLDERS = frozenset(
    {
        "",
        "0",
        "0123456789",
        "default string",
        "none",
        "n/a",
        "not applicable",
        "not specified",
        "system serial number",
        "chassis serial number",
        "base board serial number",
        "to be filled by o.e.m.",
    }
)


def parse_dmi_serials(stdout: str) -> list[Measurement]:
    """The node-file reader's output for DMI_DIR -> one text measurement per serial; an unreadable,
    absent or placeholder serial is text "" with labels["missing"] saying why."""
    names = tuple(DMI_SERIALS)
    try:
        files = read_files(stdout, names).get(DMI_DIR)
    except EvidenceError as exc:
        return [Measurement(name=m, text="", labels={"missing": str(exc)}) for m in DMI_SERIALS.values()]
    out = []
    for file, name in DMI_SERIALS.items():
        value = None if files is None else files.get(file)
        if files is None:
            why = f"no {DMI_DIR} on the node (no DMI tables)"
        elif value is None:
            why = f"{DMI_DIR}/{file} unreadable (root only on most kernels)"
        elif value.strip().lower() in DMI_PLACEHOLDERS:
            why = f"{DMI_DIR}/{file} holds the placeholder {value.strip()!r}"
        else:
            out.append(Measurement(name=name, text=value.strip()))
            continue
        out.append(Measurement(name=name, text="", labels={"missing": why}))
    return out


@dataclass
class InventoryThresholds:
    # None: use the node's expected_gpus, else only require at least one GPU.
    # Hardware profiles set it (HGX/DGX baseboards carry 8 GPUs).
    expected_gpu_count: int | None = None
    # Comma-separated NVML product names; "" accepts any model.
    expected_models: str = ""
    # Exact driver string to pin (e.g. the site's validated build); "" = don't pin.
    expected_driver: str = ""
    # Oldest acceptable driver, compared numerically per dotted part; "" = no floor.
    min_driver: str = ""

    def __post_init__(self) -> None:
        if self.expected_gpu_count is not None and self.expected_gpu_count < 0:
            raise ParamsError(f"threshold 'expected_gpu_count': must be >= 0, got {self.expected_gpu_count}")
        if self.min_driver and parse_version(self.min_driver) is None:
            raise ParamsError(
                f"threshold 'min_driver': expected a dotted version like 550.54.15, got {self.min_driver!r}"
            )


@register
class GpuInventory(ProbeCheck):
    key: ClassVar[str] = "gpu_inventory"
    name: ClassVar[str] = "GPU inventory"
    description: ClassVar[str] = "GPU count, model and driver match the profile, and every node agrees with its peers."
    Params: ClassVar[type] = ProbeParams
    Thresholds: ClassVar[type] = InventoryThresholds
    # The GPU identities a certificate names for each node, and the hardware identities it seals.
    presentation: ClassVar[Presentation] = Presentation(
        gpu_identity=(("gpu_uuid", "uuid"), ("gpu_serial", "serial")),
        hardware=(
            HardwareIdentity("system_serial", "chassis", "system serial"),
            HardwareIdentity("board_serial", "chassis", "board serial"),
            HardwareIdentity("chassis_serial", "chassis", "chassis serial"),
            HardwareIdentity("gpu_serial", "GPU", "serial", key="gpu"),
            HardwareIdentity("gpu_uuid", "GPU", "uuid", key="gpu"),
            HardwareIdentity("gpu_vbios", "GPU", "vbios", key="gpu", identifies=False),
            HardwareIdentity("psu_serial", "PSU", "serial", key="psu"),
        ),
        gpu_bus_id="gpu_pci_bus_id",
        remedies=(
            Remedy("software", REINSTALL_DRIVER, ("driver_version", "cuda_version")),
            Remedy("gpu-missing", GPU_MISSING, ("gpu_count", "gpu_model", "gpu_present")),
        ),
    )
    consensus_names: ClassVar[frozenset[str] | None] = frozenset(
        {"gpu_count", "driver_version", "cuda_version", "gpu_model"}  # what inventory_facts reads
    )

    @classmethod
    def consensus(cls, per_node: dict[str, list[Measurement]]) -> dict[str, str]:
        facts = {node: inventory_facts(measurements) for node, measurements in per_node.items()}
        return inventory_consensus({node: f for node, f in facts.items() if f})

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        # The identity reads take at most the check's own time limit each: a plan that gives the
        # inventory a few seconds does not get 35 s of them on top.
        within = float(params.timeout_s)
        dmi_bound = min(float(DMI_TIMEOUT_S), within)
        dmi = read_files_command(DMI_DIR, tuple(DMI_SERIALS), label=DMI_LABEL, timeout=dmi_bound)
        return [*super().commands(params, node), dmi, fru_command(within)]

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        # A probe output alone (stored before the identity reads, or one file parsed by hand) records
        # no chassis or PSU identity rather than an empty one.
        dmi = [o for o in outputs if o.command.label == DMI_LABEL]
        fru = [o for o in outputs if o.command.label == FRU_LABEL]
        probe = [o for o in outputs if o.command.label not in (DMI_LABEL, FRU_LABEL)]
        found = super().parse(probe) + (parse_dmi_serials(dmi[0].stdout) if dmi else [])
        return found + (psu_measurements(fru[0].stdout) if fru else [])

    def measure(self, probe: Probe) -> list[Measurement]:
        out = [
            probe.top_text("driver_version", "driver_version"),
            probe.top_text("cuda_version", "cuda_version"),
        ]
        hostname = probe.doc.get("hostname")
        if isinstance(hostname, str) and hostname:
            out.append(Measurement(name="hostname", text=hostname))
        for gpu in probe.gpus:
            out += [
                gpu.text("gpu_model", "name"),
                gpu.text("gpu_uuid", "uuid"),
                gpu.text("gpu_serial", "serial"),
                gpu.text("gpu_pci_bus_id", "pci_bus_id"),
                gpu.text("gpu_vbios", "vbios_version"),
            ]
        return out

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: InventoryThresholds = thresholds
        facts = Facts(measurements)
        findings: list[Finding] = []

        count_m = facts.get("gpu_count")
        expected = node.expected_gpus if node.expected_gpus is not None else t.expected_gpu_count
        if count_m.value is None:
            findings.append(Finding(ERROR, f"GPU count unavailable ({facts.missing('gpu_count')})"))
        else:
            count = int(count_m.value)
            if expected is not None:
                count_m.threshold, count_m.ok = f"== {expected}", count == expected
                if count != expected:
                    findings.append(Finding(FAIL, f"expected {expected} GPUs, found {count}"))
            else:
                count_m.threshold, count_m.ok = ">= 1", count >= 1
                if count == 0:
                    findings.append(Finding(FAIL, "no GPUs found"))
            unlisted = facts.unlisted() or []
            if unlisted:
                # The driver counts them but they could not be queried: a GPU off the bus.
                findings.append(
                    Finding(FAIL, f"{gpu_list(unlisted)}: counted by the driver but not listed by the probe")
                )

        models = split_models(t.expected_models)
        for i in facts.listed:
            if i in facts.silent:
                findings.append(Finding(FAIL, f"GPU {i}: not responding ({facts.silent[i]})"))
                continue
            model = facts.get("gpu_model", i)
            if not model.text:
                findings.append(Finding(ERROR, f"GPU {i}: model unavailable ({facts.missing('gpu_model', i)})"))
            elif models:
                model.threshold = "in " + ", ".join(models)
                model.ok = model.text in models
                if not model.ok:
                    findings.append(Finding(FAIL, f"GPU {i}: model {model.text}, expected {' or '.join(models)}"))
            if not facts.get("gpu_uuid", i).text:
                # The UUID is the identity a certificate names; without it the GPU is anonymous.
                findings.append(Finding(ERROR, f"GPU {i}: UUID unavailable ({facts.missing('gpu_uuid', i)})"))

        findings += self._driver_findings(facts, t)
        ok_models = sorted({facts.get("gpu_model", i).text for i in facts.answered} - {""})
        pass_reason = (
            f"{len(facts.answered)} x {', '.join(ok_models) or 'GPU'}, driver {facts.get('driver_version').text}"
        )
        if not findings:
            findings.append(Finding(PASS, pass_reason))
        return Verdict.from_findings(findings, pass_reason=pass_reason)

    def _driver_findings(self, facts: Facts, t: InventoryThresholds) -> list[Finding]:
        driver_m = facts.get("driver_version")
        driver = driver_m.text
        if not driver:
            return [Finding(ERROR, f"driver version unavailable ({facts.missing('driver_version')})")]
        findings: list[Finding] = []
        checks: list[bool] = []
        if t.expected_driver:
            checks.append(driver == t.expected_driver)
            driver_m.threshold = f"== {t.expected_driver}"
            if driver != t.expected_driver:
                findings.append(Finding(FAIL, f"driver {driver}, expected {t.expected_driver}"))
        if t.min_driver:
            have, need = parse_version(driver), parse_version(t.min_driver)
            driver_m.threshold = " and ".join(filter(None, [driver_m.threshold, f">= {t.min_driver}"]))
            if have is None:
                findings.append(Finding(ERROR, f"driver version {driver!r} is not a dotted number; cannot compare"))
            else:
                checks.append(have >= (need or ()))
                if have < (need or ()):
                    findings.append(Finding(FAIL, f"driver {driver} is older than the minimum {t.min_driver}"))
        if checks:
            driver_m.ok = all(checks)
        return findings


# --- cross-node agreement ------------------------------------------------------------------------

_FACT_LABELS = {
    "gpu_count": "GPU count",
    "gpu_model": "GPU model",
    "driver_version": "driver",
    "cuda_version": "CUDA",
}


def inventory_facts(measurements: list[Measurement]) -> dict[str, str]:
    """The per-node facts `inventory_consensus` compares, from gpu_inventory measurements.
    Unknown facts are left out (they are judged per node, not by the majority)."""
    facts: dict[str, str] = {}
    for m in measurements:
        if m.name == "gpu_count" and m.value is not None:
            facts["gpu_count"] = str(int(m.value))
        elif m.name in ("driver_version", "cuda_version") and m.text:
            facts[m.name] = m.text
    models = sorted({m.text for m in measurements if m.name == "gpu_model" and m.text})
    if models:
        facts["gpu_model"] = ",".join(models)
    return facts


def inventory_consensus(facts: dict[str, dict[str, str]], *, notes: list[str] | None = None) -> dict[str, str]:
    """Nodes that disagree with the strict majority, node -> reason.

    `facts` maps node -> {"driver_version", "gpu_model", "gpu_count", "cuda_version"}.
    For each fact, the nodes that report it vote; a value held by more than half
    of them is the majority, and every node with another value is flagged:
    "driver 535.104.05 differs from 7 of 8 nodes (550.54.15)". With no strict
    majority nothing is flagged (we cannot tell which side is wrong); a line
    goes to `notes` when given."""
    keys = [k for k in _FACT_LABELS if any(k in f for f in facts.values())]
    keys += sorted({k for f in facts.values() for k in f} - set(keys))
    flagged: dict[str, list[str]] = {}
    for key in keys:
        values = {node: str(f[key]) for node, f in facts.items() if f.get(key) not in (None, "")}
        if len(values) < 2:
            continue
        tally = Counter(values.values())
        top, top_count = tally.most_common(1)[0]
        label = _FACT_LABELS.get(key, key)
        if top_count * 2 <= len(values):
            if notes is not None and len(tally) > 1:
                spread = ", ".join(f"{v} on {c}" for v, c in sorted(tally.items(), key=lambda kv: (-kv[1], kv[0])))
                notes.append(f"no majority for {label}: {spread} nodes")
            continue
        for node, value in values.items():
            if value != top:
                flagged.setdefault(node, []).append(
                    f"{label} {value} differs from {top_count} of {len(values)} nodes ({top})"
                )
    return {node: "; ".join(reasons) for node, reasons in sorted(flagged.items())}
