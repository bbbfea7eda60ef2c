"""The node-side facts of the GPU configuration check (checks/gpu/config.py) besides nvidia-smi and
lspci: the fabric manager's systemd unit and the kernel's IOMMU mode.

`systemctl show UNIT --property=...` prints `Key=value` lines and exits 0 for a unit that does
not exist too (LoadState=not-found), so one command tells "stopped", "failed" and "not installed"
apart (systemctl(1), `show`); `systemctl is-active` would answer with exit codes 3 and 4 instead.

`/proc/cmdline` holds the kernel's boot parameters. The IOMMU mode they ask for
(kernel-parameters.txt): `intel_iommu=off`, `amd_iommu=off` or `iommu=off` turn it off;
`iommu=pt` or `iommu.passthrough=1` put devices in passthrough (identity) mode; `intel_iommu=on`,
`amd_iommu=on`, `iommu=nopt` or `iommu.passthrough=0` ask for translated DMA; nothing at all
leaves the kernel's build default ("default": translated DMA on most distribution kernels where
the firmware enables the IOMMU). A vendor's switch says nothing of the other vendor's IOMMU: the
parameters read are kept beside the mode, so an `intel_iommu=off` on an AMD node shows.
"""

from __future__ import annotations

import re

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser

FM_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result")
IOMMU_MODES = ("off", "passthrough", "translated", "default")
_IOMMU_KEYS = ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough")


def read_unit(text: str, unit: str) -> Measurement:
    """`systemctl show UNIT` -> fabric_manager: text ActiveState, labels unit and the other states."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    m = Measurement(name="fabric_manager", text=values.get("ActiveState", ""), labels={"unit": unit})
    for key in FM_PROPERTIES[:1] + FM_PROPERTIES[2:]:
        m.labels[key.lower()] = values.get(key, "")
    absent = [key for key in FM_PROPERTIES if key not in values]
    if absent:  # each was asked for, and systemd prints every property asked for: cut short
        m.labels["missing"] = f"systemctl show printed no {', '.join(absent)}"
    elif not text.endswith("\n"):  # systemd ends every line: a last one without its end was cut
        m.labels["missing"] = "systemctl show output cut short (no end of line after its last value)"
    return m


def iommu_mode(cmdline: str) -> tuple[str, list[str]]:
    """The kernel command line -> (mode, the IOMMU parameters it holds). A value the kernel does
    not define (a typo: `iommu=tp`) sets nothing, as in the kernel: the default stays in force."""
    found = [word for word in cmdline.split() if word.split("=", 1)[0] in _IOMMU_KEYS]
    values: dict[str, list[str]] = {}
    for word in found:
        key, _, value = word.partition("=")
        values.setdefault(key, []).extend(v.strip().lower() for v in value.split(","))
    off = "off" in values.get("intel_iommu", []) or "off" in values.get("amd_iommu", [])
    if off or "off" in values.get("iommu", []):
        return "off", found
    passthrough = values.get("iommu.passthrough", [])
    if "pt" in values.get("iommu", []) or any(v in ("1", "y", "on") for v in passthrough):
        return "passthrough", found
    translated = "on" in values.get("intel_iommu", []) or "on" in values.get("amd_iommu", [])
    if translated or "nopt" in values.get("iommu", []) or any(v in ("0", "n", "off") for v in passthrough):
        return "translated", found
    return "default", found


def read_cmdline(text: str) -> Measurement:
    """`cat /proc/cmdline` -> iommu_mode: text the mode, labels params (the IOMMU parameters)."""
    lines = [line for line in text.splitlines() if line.strip()]
    m = Measurement(name="iommu_mode")
    if len(lines) != 1:
        m.labels["missing"] = "the kernel command line is empty" if not lines else "/proc/cmdline is not one line"
        return m
    mode, found = iommu_mode(lines[0])
    m.text, m.labels["params"] = mode, " ".join(found)
    return m


@register_parser("kernel_cmdline")
def parse_kernel_cmdline(text: str) -> Parsed:
    m = read_cmdline(text)
    if m.labels.get("missing"):
        raise EvidenceError(m.labels["missing"])
    return Parsed([m])


_FM_ENTRY = re.compile(
    r"^\[(?P<time>[A-Z][a-z]{2} \d{1,2} \d{4} \d{2}:\d{2}:\d{2})\] \[(?P<level>[A-Z]+)\] \[tid \d+\] (?P<text>.*)$"
)
_FM_SWITCH = re.compile(
    r"NVSwitch pci bus id (?P<bus>[0-9A-Fa-f:.]+)(?: physical id (?P<phys>\d+))?(?: port (?P<port>\d+))?"
)
FM_BAD_LEVELS = ("ERROR", "FATAL")


def read_fabricmanager_log(text: str) -> list[Measurement]:
    """/var/log/fabricmanager.log -> fm_log_entries and fm_log_errors (counts), and one fm_log_error
    per ERROR/FATAL entry: text the message, labels time, level, and the NVSwitch (pci bus id,
    physical id, port) it names. Lines that are no `[time] [LEVEL] [tid N]` entry continue the
    entry above (message payloads) and are not counted."""
    entries = errors = 0
    out: list[Measurement] = []
    for line in text.splitlines():
        match = _FM_ENTRY.match(line.strip())
        if match is None:
            continue
        entries += 1
        if match["level"] not in FM_BAD_LEVELS:
            continue
        errors += 1
        labels = {"time": match["time"], "level": match["level"]}
        if switch := _FM_SWITCH.search(match["text"]):
            labels |= {"nvswitch": switch["bus"], "physical_id": switch["phys"] or "", "port": switch["port"] or ""}
        out.append(Measurement(name="fm_log_error", text=match["text"].strip(), labels=labels))
    if not entries:
        raise EvidenceError("no '[time] [LEVEL] [tid N]' entry: not a fabric manager log")
    counts = [
        Measurement(name="fm_log_entries", value=float(entries)),
        Measurement(name="fm_log_errors", value=float(errors)),
    ]
    return counts + out


@register_parser("fabricmanager_log")
def parse_fabricmanager_log(text: str) -> Parsed:
    measurements = read_fabricmanager_log(text)
    return Parsed(measurements, [f"{m.labels['time']} {m.text}" for m in measurements if m.name == "fm_log_error"])
