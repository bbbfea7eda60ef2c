"""The power supplies' serials as the node's BMC lists them in its FRU inventory (`ipmitool fru print`).

The GPU inventory reads them beside the probe and the DMI serials (checks/gpu/inventory.py) for the
identities a certificate seals; nothing here is judged. ipmitool runs in band (it needs the node's
/dev/ipmi0, usually root only) under a `timeout` of its own, inside a shell that prints its exit
code, so a node without ipmitool, without an IPMI device, or with a slow BMC records "not read"
instead of failing the inventory.

`ipmitool fru print` prints one block per FRU device (ipmitool lib/ipmi_fru.c):

    FRU Device Description : PS0 (ID 63)
     Board Mfg             : POWER ONE
     Board Serial          : 9038BAO-0926A30L9J

A power supply is a device named PSn, PSUn, PWSn or "Power Supply n" (with a vendor suffix such as
PSU1_FRU); its serial is the Product Serial, else the Board Serial (Sun/Oracle and Dell power
supplies fill only the board area). A bay that says "Device not present" holds no part. A listed
supply without a serial is recorded as not reported.
"""

from __future__ import annotations

import re

from checks.core.base import Command, Measurement
from checks.core.parsers import Parsed, register_parser

FRU_LABEL = "bmc fru"
EXIT_MARK = "kiln-fru-exit"
# In-band FRU reads are slow (every device is read over KCS, an absent one times out): 20 s covers
# the dozens of devices of a large server (ipmitool's own in-band timeout is 15 s per request).
FRU_TIMEOUT_S = 20
KILL_GRACE_S = 2  # `timeout -k`: SIGKILL this long after SIGTERM
COMMAND_SLACK_S = 3  # the shell and the transport around it
_DEVICE = re.compile(r"^FRU Device Description\s*:\s*(?P<name>.*?)(?:\s*\(ID\s*\w+\))?\s*$")
_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z ]*?)\s*:\s*(?P<value>.*?)\s*$")
_PSU = re.compile(r"^(?:PSU?|PWS|POWER[ _]?SUPPLY)[ _-]?\d+", re.IGNORECASE)
_PLACEHOLDERS = frozenset({"", "n/a", "na", "unknown", "not specified", "to be filled by o.e.m."})


def fru_command(within_s: float = FRU_TIMEOUT_S) -> Command:
    """`ipmitool fru print` under `timeout` (`within_s`, at most FRU_TIMEOUT_S), its exit code
    printed after its output: the shell always exits 0, so the inventory never fails on the BMC."""
    bound = min(float(within_s), float(FRU_TIMEOUT_S))
    script = f'timeout -k {KILL_GRACE_S} {bound:g} ipmitool fru print 2>/dev/null; echo "{EXIT_MARK} $?"'
    limit = bound + KILL_GRACE_S + COMMAND_SLACK_S
    return Command(argv=("sh", "-c", script), timeout=limit, label=FRU_LABEL, read_only=True)


def fru_exit(stdout: str) -> int | None:
    """The exit code the shell printed after ipmitool; None when the output was cut before it."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines or not lines[-1].startswith(EXIT_MARK + " "):
        return None
    code = lines[-1].split()[-1]
    return int(code) if code.isdigit() else None


def parse_fru_psus(text: str) -> list[Measurement]:
    """`ipmitool fru print` -> one `psu_serial` text measurement per listed power supply, label
    `psu` its FRU name; "" with labels["missing"] where the BMC gives no serial."""
    out: list[Measurement] = []
    name = ""
    fields: dict[str, str] = {}
    present = True

    def flush() -> None:
        if not name or not _PSU.match(name) or not present:
            return
        serial = fields.get("Product Serial") or fields.get("Board Serial") or ""
        if serial.strip().lower() in _PLACEHOLDERS:
            why = f"the BMC lists {name} with no serial" + (f" ({serial!r})" if serial else "")
            out.append(Measurement(name="psu_serial", text="", labels={"psu": name, "missing": why}))
        else:
            out.append(Measurement(name="psu_serial", text=serial.strip(), labels={"psu": name}))

    for raw in text.splitlines():
        if match := _DEVICE.match(raw.strip()):
            flush()
            name, fields, present = match["name"].strip(), {}, True
        elif "Device not present" in raw:
            present = False
        elif (field := _FIELD.match(raw)) and name:
            fields.setdefault(field["key"], field["value"])
    flush()
    return out


def psu_measurements(stdout: str) -> list[Measurement]:
    """The PSU serials of a `fru_command` output; none when ipmitool failed, timed out or the output
    was cut (then the PSUs were not read: a verifier must not call them missing)."""
    if fru_exit(stdout) != 0:
        return []
    return parse_fru_psus(stdout)


@register_parser("ipmitool_fru")
def parse_ipmitool_fru(text: str) -> Parsed:
    """`python -m checks parse ipmitool_fru FILE`: the power supplies' serials of a FRU listing."""
    found = parse_fru_psus(text)
    return Parsed(found, [] if found else ["no power supply listed"])
