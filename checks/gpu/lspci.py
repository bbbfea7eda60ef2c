"""`lspci -vvv` (with or without -D and -nn) read into PCIe bridges, their ACS control and the GPUs
and NICs below them.

lspci prints one block per PCI function: a header at column 0 (`0000:17:00.0 PCI bridge [0604]:
Broadcom / LSI PEX890xx PCIe Gen 5 Switch [1000:c030] (rev b0)`), then tab-indented lines. What is
read from a bridge's block (pciutils lib/header.h, ls-caps.c, ls-ecaps.c):
- `Bus: primary=16, secondary=17, subordinate=19, ...`: the buses behind it;
- `Capabilities: [68] Express (v2) Downstream Port (Slot+)`: which kind of port it is (Root Port,
  Upstream Port, Downstream Port: the last two are the ports of a PCIe switch);
- `ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ ...`: the ACS control bits in force;
- `Capabilities: <access denied>`: lspci could not read the capabilities (it was not run as root;
  lspci(8): "some parts of the PCI configuration space are available to root only").
A bridge has ACS on when SrcValid, ReqRedir or CmpltRedir is set: NCCL's troubleshooting guide
("PCI Access Control Services (ACS)": "If lines show SrcValid+, then ACS might be enabled") and
the PCIe spec's request/completion redirect, which send peer-to-peer traffic up to the root
complex instead of across the switch.

Measurements (parser kind `lspci_acs`):
- pci_functions: how many functions the listing holds;
- acs_enabled per bridge that has ACS control or whose capabilities were denied: 1/0 (None when
  unreadable, labels missing), labels bdf, port (root|upstream|downstream|other), ctl (the ACSCtl
  flags), below (the GPUs and NICs behind it, comma-separated bdfs; "" for none);
- pcie_endpoint per GPU (display class 03xx) and NIC (network class 02xx): text its description,
  labels bdf, kind (gpu|nic), path (the bridges above it, nearest first).
A damaged listing (a column-0 line that is no device header, a bridge without its `Bus:` line) is
EvidenceError: a bridge that drops out of the listing would drop its ACS state out of the verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser

_HEADER = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-1][0-9a-fA-F])\.(?P<fn>[0-7]) "
    r"(?P<cls>[^:\[]+?)(?: \[(?P<code>[0-9a-fA-F]{4})\])?: (?P<desc>.*)$"
)
_BUS = re.compile(
    r"^Bus: primary=(?P<primary>[0-9a-fA-F]{2}), secondary=(?P<secondary>[0-9a-fA-F]{2}), "
    r"subordinate=(?P<subordinate>[0-9a-fA-F]{2})"
)
_EXPRESS = re.compile(r"^Capabilities: \[[0-9a-fA-F]+\] Express (?:\(v\d\) )?(?P<type>[A-Za-z /-]+?)(?: \(|,|$)")
_ACS_CTL = re.compile(r"^ACSCtl:\s*(?P<flags>.*)$")
_FLAG = re.compile(r"^(?P<name>[A-Za-z]+)(?P<state>[+-])$")
PORT_TYPES = {"Root Port": "root", "Upstream Port": "upstream", "Downstream Port": "downstream"}
# ACS controls that make a switch port send peer-to-peer requests and completions upstream.
REDIRECTING = ("SrcValid", "ReqRedir", "CmpltRedir")
BRIDGE_CLASSES = ("PCI bridge",)
GPU_CLASSES = ("VGA compatible controller", "3D controller", "Display controller")
NIC_CLASSES = ("Ethernet controller", "Infiniband controller", "Network controller")
MAX_DEPTH = 32  # deeper than any PCIe hierarchy (a switch adds two levels): a loop, not a path


@dataclass
class PciFunction:
    """One lspci block."""

    domain: str
    bus: int
    bdf: str
    cls: str
    code: str
    desc: str
    lines: list[str] = field(default_factory=list)
    secondary: int | None = None
    subordinate: int | None = None
    port: str = ""
    denied: bool = False
    acs_ctl: str | None = None

    @property
    def is_bridge(self) -> bool:
        return self.code == "0604" or self.cls in BRIDGE_CLASSES

    @property
    def kind(self) -> str:
        if self.code[:2] == "03" or self.cls in GPU_CLASSES:
            return "gpu"
        if self.code[:2] == "02" or self.cls in NIC_CLASSES:
            return "nic"
        return ""


def read_functions(text: str) -> list[PciFunction]:
    """Every block of an `lspci -vvv` listing; EvidenceError on a damaged one."""
    functions: list[PciFunction] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        if raw[0] in " \t":
            if functions:
                functions[-1].lines.append(raw.strip())
            continue
        match = _HEADER.match(raw.rstrip())
        if match is None:
            if raw.startswith(("lspci:", "pcilib:")):
                continue  # a warning of lspci's own, where stderr was merged into the listing
            raise EvidenceError(f"lspci: {raw.strip()[:80]!r} is not a device header (output damaged?)")
        domain = (match["domain"] or "0000").lower().rjust(4, "0")
        bdf = f"{domain}:{match['bus']}:{match['dev']}.{match['fn']}".lower()
        code = (match["code"] or "").lower()
        functions.append(PciFunction(domain, int(match["bus"], 16), bdf, match["cls"].strip(), code, match["desc"]))
    if not functions:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        raise EvidenceError(f"lspci listed no device ({first[:80]!r})" if first else "lspci printed nothing")
    for fn in functions:
        _read_block(fn)
    return functions


def _read_block(fn: PciFunction) -> None:
    for line in fn.lines:
        if match := _BUS.match(line):
            fn.secondary, fn.subordinate = int(match["secondary"], 16), int(match["subordinate"], 16)
        elif line.startswith("Capabilities: <access denied>"):
            fn.denied = True
        elif match := _EXPRESS.match(line):
            fn.port = PORT_TYPES.get(match["type"].strip(), "other")
        elif match := _ACS_CTL.match(line):
            fn.acs_ctl = match["flags"].strip()
    if fn.is_bridge and fn.secondary is None:
        raise EvidenceError(f"lspci: bridge {fn.bdf} has no 'Bus: primary=, secondary=' line (output damaged?)")


def acs_flags(ctl: str) -> dict[str, bool] | None:
    """'SrcValid+ TransBlk- ...' -> {'SrcValid': True, ...}; None when a word is not Name+/Name-."""
    flags: dict[str, bool] = {}
    for word in ctl.split():
        match = _FLAG.match(word)
        if match is None:
            return None
        flags[match["name"]] = match["state"] == "+"
    return flags if flags else None


def parent_of(fn: PciFunction, bridges: list[PciFunction]) -> PciFunction | None:
    """The bridge whose secondary bus is `fn`'s bus; None on a root bus (no bridge spans it).
    EvidenceError when the listing lacks that bridge (another one's range spans the bus, so the
    one leading to it was there) or holds two: a listing with a bridge missing is damaged."""
    same = [b for b in bridges if b is not fn and b.domain == fn.domain]
    leading = [b for b in same if b.secondary == fn.bus]
    if len(leading) > 1:
        raise EvidenceError(f"lspci: two bridges lead to bus {fn.domain}:{fn.bus:02x} (output damaged?)")
    if leading:
        return leading[0]
    spanning = [
        b
        for b in same
        if b.secondary is not None and b.subordinate is not None and b.secondary < fn.bus <= b.subordinate
    ]
    if spanning:
        raise EvidenceError(
            f"lspci: no bridge leads to bus {fn.domain}:{fn.bus:02x} of {fn.bdf}, yet {spanning[0].bdf} spans it "
            "(listing incomplete or damaged)"
        )
    return None


def path_of(fn: PciFunction, bridges: list[PciFunction]) -> list[PciFunction]:
    """The bridges above `fn`, nearest first."""
    path: list[PciFunction] = []
    node = parent_of(fn, bridges)
    while node is not None and len(path) < MAX_DEPTH:
        path.append(node)
        node = parent_of(node, bridges)
    if len(path) >= MAX_DEPTH:
        raise EvidenceError(f"lspci: the bridges above {fn.bdf} form a loop (output damaged?)")
    return path


def read_acs(text: str) -> list[Measurement]:
    """`lspci -vvv` -> acs_enabled per bridge and pcie_endpoint per GPU/NIC (module docstring)."""
    functions = read_functions(text)
    bridges = [fn for fn in functions if fn.is_bridge]
    below: dict[str, list[str]] = {b.bdf: [] for b in bridges}
    out = [Measurement(name="pci_functions", value=float(len(functions)))]
    for fn in functions:
        if not fn.kind:
            continue
        path = path_of(fn, bridges)
        for bridge in path:
            below[bridge.bdf].append(fn.bdf)
        labels = {"bdf": fn.bdf, "kind": fn.kind, "path": ",".join(b.bdf for b in path)}
        out.append(Measurement(name="pcie_endpoint", text=fn.desc.strip(), labels=labels))
    for bridge in bridges:
        if bridge.acs_ctl is None and not bridge.denied:
            continue  # no ACS capability: nothing on this bridge can redirect peer-to-peer traffic
        port = "unknown" if bridge.denied else (bridge.port or "other")
        labels = {"bdf": bridge.bdf, "port": port, "below": ",".join(below[bridge.bdf])}
        m = Measurement(name="acs_enabled", labels=labels)
        flags = acs_flags(bridge.acs_ctl or "")
        if bridge.denied:
            m.labels["missing"] = "capabilities not readable (lspci shows '<access denied>': it needs root)"
        elif flags is None:
            m.labels["missing"] = f"ACSCtl line unreadable: {bridge.acs_ctl!r}"
        else:
            m.labels["ctl"] = " ".join(f"{k}{'+' if v else '-'}" for k, v in flags.items())
            m.value = 1.0 if any(flags.get(name) for name in REDIRECTING) else 0.0
        out.append(m)
    return out


@register_parser("lspci_acs")
def parse_lspci_acs(text: str) -> Parsed:
    measurements = read_acs(text)
    warnings = [f"bridge {m.labels['bdf']}: {m.labels['missing']}" for m in measurements if m.labels.get("missing")]
    return Parsed(measurements, warnings)
