"""Judging the GPU configuration facts (checks/gpu/config.py): one finding per GPU, service, bridge
and boot setting out of line, each saying what to do; a fact that could not be read is `error`."""

from __future__ import annotations

from typing import Any

from checks.core.base import ERROR, FAIL, PASS, Finding, Measurement, Verdict
from checks.core.probe_check import gpu_list

SWITCH_PORTS = ("downstream", "upstream")


class Facts:
    """Measurements by (name, gpu), and the ones of a name."""

    def __init__(self, measurements: list[Measurement]) -> None:
        self.all = measurements
        self.by_key: dict[tuple[str, int | None], Measurement] = {}
        for m in measurements:
            self.by_key.setdefault((m.name, m.gpu), m)
        self.gpus = sorted({m.gpu for m in measurements if m.gpu is not None and m.name == "persistence_mode"})

    def get(self, name: str, gpu: int | None = None) -> Measurement:
        found = self.by_key.get((name, gpu))
        if found is None:  # given measurements from elsewhere: absent is missing, never a pass
            found = Measurement(name=name, gpu=gpu, labels={"missing": "measurement absent"})
            self.by_key[(name, gpu)] = found
        return found

    def named(self, name: str) -> list[Measurement]:
        return [m for m in self.all if m.name == name]


def _where(facts: Facts, i: int) -> str:
    bus = facts.get("persistence_mode", i).labels.get("bus", "")
    return f"GPU {i} ({bus})" if bus else f"GPU {i}"


def _missing(m: Measurement) -> str:
    return m.labels.get("missing") or "not reported"


def persistence(facts: Facts, t: Any, i: int) -> list[Finding]:
    m = facts.get("persistence_mode", i)
    if not t.require_persistence:
        return []
    if m.value is None:
        return [Finding(ERROR, f"{_where(facts, i)}: persistence mode unknown ({_missing(m)})")]
    m.threshold, m.ok = "== 1", m.value == 1.0
    if m.ok:
        return []
    fix = "enable nvidia-persistenced (systemctl enable --now nvidia-persistenced) or run nvidia-smi -pm 1"
    return [Finding(FAIL, f"{_where(facts, i)}: persistence mode Disabled; {fix}")]


def mig(facts: Facts, t: Any, i: int) -> list[Finding]:
    m = facts.get("mig_mode", i)
    if t.expected_mig == "any":
        return []
    current, pending = m.text, m.labels.get("pending", "")
    if not current:
        return [Finding(ERROR, f"{_where(facts, i)}: MIG mode unknown ({_missing(m)})")]
    want = "Enabled" if t.expected_mig == "enabled" else "Disabled"
    # N/A: the GPU has no MIG (pre-Ampere, most PCIe boards): as good as disabled, never enabled.
    fine = {want, "N/A", ""} if want == "Disabled" else {want}
    m.threshold = f"== {want}"
    m.ok = (current or "N/A") in fine and (pending or current or "N/A") in fine
    if m.ok:
        return []
    if (current or "N/A") in fine:
        why = f"MIG mode {current}, pending {pending}: the change waits for a GPU reset (nvidia-smi -r -i {i})"
    else:
        how = "nvidia-smi -mig 0" if want == "Disabled" else "nvidia-smi -mig 1"
        why = f"MIG mode {current} (pending {pending or 'N/A'}), expected {want}: {how} -i {i}, then reset the GPU"
    return [Finding(FAIL, f"{_where(facts, i)}: {why}")]


def clocks(facts: Facts, t: Any, i: int) -> list[Finding]:
    app, default = facts.get("app_clock_graphics", i), facts.get("default_app_clock_graphics", i)
    top = facts.get("max_clock_graphics", i)
    findings: list[Finding] = []
    if app.value is None or default.value is None:
        bad = app if app.value is None else default
        findings.append(Finding(ERROR, f"{_where(facts, i)}: graphics applications clock unknown ({_missing(bad)})"))
    else:
        floor = default.value - t.max_app_clock_deficit_mhz
        app.threshold, app.ok = f">= {floor:g}", app.value >= floor
        if not app.ok:
            peak = f", max {top.value:g}" if top.value is not None else ""
            findings.append(
                Finding(
                    FAIL,
                    f"{_where(facts, i)}: graphics applications clock {app.value:g} MHz, default "
                    f"{default.value:g} MHz{peak}: reset it with nvidia-smi -rac -i {i}",
                )
            )
    reason = facts.get("clocks_event_app_setting", i)
    if t.fail_on_clock_setting:
        if reason.value is None:
            findings.append(Finding(ERROR, f"{_where(facts, i)}: clocks event reasons unknown ({_missing(reason)})"))
        else:
            reason.threshold, reason.ok = "== 0", reason.value == 0.0
            if not reason.ok:
                findings.append(
                    Finding(
                        FAIL,
                        f"{_where(facts, i)}: clocks held by an applications or locked clock setting (clocks event "
                        f"reason 'Applications Clocks Setting' active): nvidia-smi -rgc -i {i}; nvidia-smi -rac -i {i}",
                    )
                )
    return findings


def fabric(facts: Facts, t: Any) -> list[Finding]:
    """Every GPU's fabric registration; GPUs in the same state share one finding (a fabric manager
    that is down leaves all of them In Progress: one cause, one line)."""
    if not t.require_fabric:
        return []
    by_why: dict[tuple[str, str], list[int]] = {}
    for i in facts.gpus:
        found = _fabric_one(facts, i)
        if found is not None:
            by_why.setdefault(found, []).append(i)
    findings = []
    for (status, why), gpus in by_why.items():
        where = _where(facts, gpus[0]) if len(gpus) == 1 else gpu_list(gpus)
        findings.append(Finding(status, f"{where}: {why}"))
    return findings


def _fabric_one(facts: Facts, i: int) -> tuple[str, str] | None:
    state, status = facts.get("fabric_state", i), facts.get("fabric_status", i)
    if not state.text or state.text == "N/A":
        why = (
            _missing(state) if not state.text else "N/A (no NVSwitch fabric seen by the driver, or a driver before 530)"
        )
        return ERROR, f"NVSwitch fabric state unknown ({why})"
    state.threshold, state.ok = "== Completed", state.text == "Completed"
    status.threshold, status.ok = "== Success", status.text == "Success"
    if state.ok and status.ok:
        return None
    if not state.ok:
        why = (
            f"fabric registration {state.text} (Status {status.text or 'N/A'}): not registered with the NVSwitch "
            "fabric; check nvidia-fabricmanager (systemctl status nvidia-fabricmanager; /var/log/fabricmanager.log)"
        )
    else:
        why = (
            f"fabric registration Completed with Status {status.text or 'N/A'}: the fabric manager could not "
            "admit the GPU; see /var/log/fabricmanager.log, then restart nvidia-fabricmanager or reset the GPUs"
        )
    return FAIL, why


def fabric_manager(facts: Facts) -> list[Finding]:
    units = facts.named("fabric_manager")
    if not units:
        return []
    m = units[0]
    unit = m.labels.get("unit", "fabric manager")
    if m.labels.get("missing"):
        return [Finding(ERROR, f"{unit}: state unknown ({_missing(m)})")]
    m.threshold, m.ok = "== active", m.text == "active"
    if m.ok:
        return []
    if m.labels.get("loadstate") == "not-found":
        return [
            Finding(
                FAIL,
                f"{unit}: not installed (systemd has no such unit); install the fabric manager matching the driver",
            )
        ]
    sub, result = m.labels.get("substate", ""), m.labels.get("result", "")
    detail = ", ".join(x for x in (f"SubState {sub}" if sub else "", f"Result {result}" if result else "") if x)
    return [
        Finding(
            FAIL,
            f"{unit} is {m.text}{f' ({detail})' if detail else ''}: systemctl restart {unit}; "
            f"journalctl -u {unit} says why it stopped",
        )
    ]


def _judged_bridge(m: Measurement, scope: str) -> bool:
    below = m.labels.get("below", "")
    if scope == "all":
        return True
    if not below:
        return False
    if scope == "path" or m.value is None:  # an unreadable bridge above a GPU/NIC may be a switch port
        return True
    return m.labels.get("port", "") in SWITCH_PORTS


def _norm_bus(bus: str) -> str:
    """'00000000:18:00.0' (nvidia-smi) -> '0000:18:00.0' (lspci -D)."""
    parts = bus.lower().split(":")
    return ":".join([parts[0][-4:].rjust(4, "0"), *parts[1:]]) if len(parts) == 3 else bus.lower()


def acs(facts: Facts, t: Any) -> list[Finding]:
    if not facts.named("pci_functions"):
        return []  # lspci was not run (check_acs off)
    endpoints = facts.named("pcie_endpoint")
    bridges = facts.named("acs_enabled")
    findings: list[Finding] = []
    listed = {m.labels.get("bdf", ""): m for m in endpoints}
    unlisted = [
        i for i in facts.gpus if _norm_bus(facts.get("persistence_mode", i).labels.get("bus", "")) not in listed
    ]
    if unlisted:
        where = _where(facts, unlisted[0]) if len(unlisted) == 1 else gpu_list(unlisted)
        findings.append(Finding(ERROR, f"{where}: not in the lspci listing (output cut, or a GPU fell off the bus)"))
    unreadable: dict[str, list[str]] = {}
    for m in bridges:
        if not _judged_bridge(m, t.acs_scope):
            continue
        where = f"bridge {m.labels.get('bdf', '?')}" + (
            f" (above {m.labels['below']})" if m.labels.get("below") else ""
        )
        if m.value is None:
            unreadable.setdefault(_missing(m), []).append(m.labels.get("bdf", "?"))
            continue
        m.threshold, m.ok = "== 0", m.value == 0.0
        if not m.ok:
            findings.append(
                Finding(
                    FAIL,
                    f"{where}: ACS enabled (ACSCtl {m.labels.get('ctl', '')}): peer-to-peer traffic goes through the "
                    "CPU; disable ACS in the BIOS or with setpci ECAP_ACS+0x6.w=0000 at boot (NCCL troubleshooting)",
                )
            )
    for why, bdfs in unreadable.items():
        named = ", ".join(bdfs[:4]) + (f" and {len(bdfs) - 4} more" if len(bdfs) > 4 else "")
        findings.append(Finding(ERROR, f"ACS state unknown on {len(bdfs)} bridges ({named}): {why}"))
    return findings


def iommu(facts: Facts, t: Any) -> list[Finding]:
    m = facts.get("iommu_mode")
    if not m.text:
        return [Finding(ERROR, f"IOMMU mode unknown ({_missing(m)})")]
    allowed = t.iommu_modes()
    m.threshold, m.ok = f"in {','.join(allowed)}", m.text in allowed
    if m.ok:
        return []
    params = m.labels.get("params", "") or "no IOMMU parameter"
    return [
        Finding(
            FAIL,
            f"IOMMU {m.text} (kernel command line: {params}), expected {' or '.join(allowed)}: add iommu=pt (or "
            "intel_iommu=off / amd_iommu=off) to the kernel command line and reboot (GPUDirect RDMA, NCCL docs)",
        )
    ]


def _summary(facts: Facts, t: Any) -> str:
    parts = [f"{len(facts.gpus)} GPUs: persistence on" if t.require_persistence else f"{len(facts.gpus)} GPUs"]
    if t.expected_mig != "any":
        parts.append(f"MIG {t.expected_mig}")
    parts.append("applications clocks at default")
    if t.require_fabric:
        parts.append("fabric Completed/Success")
    units = facts.named("fabric_manager")
    if units:
        parts.append(f"{units[0].labels.get('unit', 'fabric manager')} active")
    judged = [m for m in facts.named("acs_enabled") if m.ok is not None]
    if facts.named("pci_functions"):
        parts.append(f"ACS off on {len(judged)} bridges")
    else:
        parts.append("ACS not checked")
    parts.append(f"IOMMU {facts.get('iommu_mode').text}")
    return ", ".join(parts)


def judge(measurements: list[Measurement], t: Any) -> Verdict:
    facts = Facts(measurements)
    if not facts.gpus:
        return Verdict(ERROR, "nvidia-smi -q listed no GPU")
    # Node-wide causes first: the reason lists the first findings of the worst status.
    findings = fabric_manager(facts) + iommu(facts, t)
    for i in facts.gpus:
        findings += persistence(facts, t, i) + mig(facts, t, i) + clocks(facts, t, i)
    findings += fabric(facts, t) + acs(facts, t)
    pass_reason = _summary(facts, t)
    if not findings:
        findings.append(Finding(PASS, pass_reason))
    return Verdict.from_findings(findings, pass_reason=pass_reason)
