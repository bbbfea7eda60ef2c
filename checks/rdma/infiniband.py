"""ib_ports: InfiniBand (or RoCE) ports of the compute fabric: up, at the expected rate, all there.

Evidence is `ibstat` (infiniband-diags). Parser kind `ibstat`; measurements:
- `port_state` (text: Active, Down, Initializing, Armed) and `port_rate` (Gb/s) per port, labels
  `ca`, `port`, `link_layer` (InfiniBand | Ethernet), `physical_state` (LinkUp, Polling,
  Disabled, ...), `ca_type`;
- `ca_firmware` and `ca_guid` (text: the CA's firmware version and its Node GUID, the identity the
  certificate seals for the NIC) per CA, labels `ca`, `ca_type`.

Which ports are judged: those whose link layer is in `link_layers` ("InfiniBand" by default; RoCE
fabrics are "Ethernet", so a RoCE cluster sets "InfiniBand,Ethernet" or "Ethernet") and whose CA
is not in `ignore_cas` (front-end / management NICs such as a bonded mlx5_bond_0).

`ibstat` exits 255 when it could not query some CA yet still prints the others: that output is
kept. With the expected port count met, it is a `warn` naming the exit; otherwise an `error`
(a port that could not be read is not known to be healthy).
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
    WARN,
    Check,
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
from checks.core.evidence import COUNT, EXIT_STATUS, Rule
from checks.core.parsers import Parsed, register_parser
from checks.core.presentation import RESEAT_LINK, HardwareIdentity, Presentation, Remedy

_CA = re.compile(r"^CA '(?P<name>[^']+)'\s*$")
_PORT = re.compile(r"^Port (?P<port>\d+):\s*$")
_FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z ]*?):\s*(?P<value>.*)$")
# CA lines recorded as text measurements: the firmware, and the Node GUID that names the NIC.
_CA_TEXT = {"Firmware version": "ca_firmware", "Node GUID": "ca_guid"}
# What ibstat prints for "Link layer" (rdma-core infiniband-diags ibstat.c, link_layer_str).
_LINK_LAYERS = ("InfiniBand", "Ethernet", "Unknown")


def split_list(text: str) -> list[str]:
    return [p.strip() for p in str(text).split(",") if p.strip()]


def parse_ibstat_text(text: str) -> list[Measurement]:
    """ibstat's text -> measurements; EvidenceError when no CA block is found."""
    out: list[Measurement] = []
    ca = ca_type = ""
    port: dict[str, str] | None = None
    cas = 0
    ports: list[dict[str, str]] = []  # every port block, for the completeness check below
    declared: dict[str, int] = {}  # CA -> its "Number of ports"
    listed: dict[str, int] = {}

    def flush_port() -> None:
        if port is None:
            return
        labels = {
            "ca": ca,
            "port": port["port"],
            "link_layer": port.get("Link layer", ""),
            "physical_state": port.get("Physical state", ""),
            "ca_type": ca_type,
        }
        state = port.get("State", "")
        rate_text = port.get("Rate", "")
        try:
            rate: float | None = float(rate_text)
        except ValueError:
            rate = None
        state_m = Measurement(name="port_state", text=state, labels=dict(labels))
        rate_m = Measurement(name="port_rate", value=rate, unit="Gb/s", labels=dict(labels))
        if not state:
            state_m.labels["missing"] = "no State line"
        if rate is None:
            rate_m.labels["missing"] = f"Rate {rate_text!r}" if rate_text else "no Rate line"
        out.extend([state_m, rate_m])

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if match := _CA.match(line):
            flush_port()
            port = None
            ca, ca_type = match["name"], ""
            cas += 1
            continue
        if match := _PORT.match(line):
            flush_port()
            port = {"port": match["port"]}
            ports.append(port)
            listed[ca] = listed.get(ca, 0) + 1
            continue
        field = _FIELD.match(line)
        if not field or not ca:
            continue
        key, value = field["key"], field["value"].strip()
        if port is not None:
            port[key] = value
        elif key == "CA type":
            ca_type = value
        elif key == "Number of ports" and value.isdigit():
            declared[ca] = int(value)
        elif key in _CA_TEXT:
            out.append(Measurement(name=_CA_TEXT[key], text=value, labels={"ca": ca}))
    flush_port()
    if not cas:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        raise EvidenceError(f"ibstat printed no CA ({first[:80]!r})" if first else "ibstat printed nothing")
    _check_complete(ports, declared, listed)
    # CA type is printed after the name but before the firmware line; label firmware with it.
    types = {m.labels["ca"]: m.labels["ca_type"] for m in out if m.name == "port_state"}
    for m in out:
        if m.name in _CA_TEXT.values():
            m.labels["ca_type"] = types.get(m.labels["ca"], "")
    return out


def _check_complete(ports: list[dict[str, str]], declared: dict[str, int], listed: dict[str, int]) -> None:
    """EvidenceError when the output was cut inside a CA block: a CA listing fewer ports than its
    "Number of ports", or a last port block missing a field every other port printed (ibstat
    prints State ... Link layer for each port), or whose link layer is cut inside the word. A cut
    exactly between two CA blocks cannot be seen here; the run's majority / expected port count is
    the judge's rule for that."""
    for ca, count in declared.items():
        if listed.get(ca, 0) < count:
            raise EvidenceError(
                f"ibstat output incomplete: CA {ca!r} lists {listed.get(ca, 0)} of its {count} ports (output cut?)"
            )
    if not ports:
        return
    *others, last = ports
    expected = set.intersection(*(set(p) for p in others)) if others else {"State", "Rate"}
    missing = sorted(expected - set(last))
    if missing:
        raise EvidenceError(
            f"ibstat output incomplete: the last port block (port {last['port']}) has no {', '.join(missing)} "
            "line (output cut?)"
        )
    layer = last.get("Link layer")
    if layer is not None and layer not in _LINK_LAYERS:  # the output's last line, cut inside its value
        raise EvidenceError(f"ibstat output incomplete: the last port's link layer reads {layer!r} (output cut?)")


@register_parser("ibstat")
def parse_ibstat(text: str) -> Parsed:
    measurements = parse_ibstat_text(text)
    warnings = [] if any(m.name == "port_state" for m in measurements) else ["no ports listed"]
    return Parsed(measurements, warnings)


@dataclass
class IbParams:
    # ibstat reads sysfs and answers in well under a second; 30 s allows a wedged driver to be
    # reported as a timeout rather than hanging the run (conservative default; tune per site).
    timeout_s: int = 30


@dataclass
class IbThresholds:
    # None = not judged (generic nodes). Profiles set the compute-fabric port count.
    expected_ports: int | None = None
    # None = not judged. Profiles set NDR 400 / HDR 200 (Gb/s, as ibstat prints "Rate").
    expected_rate_gbps: float | None = None
    # Link layers of the compute fabric. RoCE fabrics report "Ethernet": set "InfiniBand,Ethernet".
    link_layers: str = "InfiniBand"
    # CAs that are not part of the compute fabric (front-end / storage / management NICs).
    ignore_cas: str = ""

    def __post_init__(self) -> None:
        if self.expected_ports is not None and self.expected_ports < 0:
            raise ParamsError(f"threshold 'expected_ports': must be >= 0, got {self.expected_ports}")
        if self.expected_rate_gbps is not None and self.expected_rate_gbps <= 0:
            raise ParamsError(f"threshold 'expected_rate_gbps': must be > 0, got {self.expected_rate_gbps}")
        if not split_list(self.link_layers):
            raise ParamsError("threshold 'link_layers': name at least one (InfiniBand, Ethernet)")


IB_CONSENSUS_NAMES = ("ports_active", "port_rate_min")  # what ib_consensus compares


# How the certificate names these measurements (checks/core/presentation.py measurement_labels).
IB_LABELS = (
    ("port_rate", "Port rate"),
    ("ports_active", "Active ports"),
)


@register
class IbPorts(Check):
    key: ClassVar[str] = "ib_ports"
    name: ClassVar[str] = "InfiniBand ports"
    description: ClassVar[str] = "Expected count of active ports at the expected rate."
    Params: ClassVar[type] = IbParams
    Thresholds: ClassVar[type] = IbThresholds
    # Each CA's Node GUID and firmware are the NIC identities a certificate seals per node.
    presentation: ClassVar[Presentation] = Presentation(
        measurement_labels=IB_LABELS,
        remedies=(Remedy("link", RESEAT_LINK),),
        hardware=(
            HardwareIdentity("ca_guid", "NIC", "guid", key="ca"),
            HardwareIdentity("ca_firmware", "NIC", "firmware", key="ca", identifies=False),
        ),
    )
    # 255: ibstat could not query some CA but printed the rest (kept; see the module docstring).
    ok_exit_codes: ClassVar[tuple[int, ...]] = (0, 255)
    evidence: ClassVar[dict[str, Rule]] = {"ibstat_exit_code": EXIT_STATUS, "ports_active": COUNT}
    consensus_names: ClassVar[frozenset[str] | None] = frozenset(IB_CONSENSUS_NAMES)
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {
        # DGX H100 user guide (hardware overview): 8x single-port ConnectX-7 for the compute
        # fabric, 400 Gb/s NDR InfiniBand each (HGX H100 reference designs use the same 8x NDR).
        "H100-SXM-8": {"expected_ports": 8, "expected_rate_gbps": 400},
        # HGX H200 reference configuration: 8x ConnectX-7 / BlueField-3 SuperNIC, 400 Gb/s each
        # (NVIDIA HGX H200 spec sheet, networking).
        "H200-SXM-8": {"expected_ports": 8, "expected_rate_gbps": 400},
        # DGX A100 user guide: 8x single-port ConnectX-6 VPI, 200 Gb/s HDR InfiniBand, compute fabric.
        "A100-SXM-8": {"expected_ports": 8, "expected_rate_gbps": 200},
    }

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        return [Command(argv=("ibstat",), timeout=float(params.timeout_s), label="ibstat", read_only=True)]

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        out = outputs[0]
        try:
            measurements = parse_ibstat_text(out.stdout)
        except EvidenceError as exc:
            hint = [s.strip() for s in out.stderr.splitlines() if s.strip()]
            raise EvidenceError(f"{exc}; exit {out.exit_code}" + (f": {hint[-1][:200]}" if hint else "")) from None
        exit_m = Measurement(name="ibstat_exit_code", value=float(out.exit_code or 0))
        if out.exit_code:
            lines = [s.strip() for s in out.stderr.splitlines() if s.strip()]
            exit_m.text = lines[-1][:300] if lines else ""
        return [exit_m, *measurements]

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: IbThresholds = thresholds
        states = [m for m in measurements if m.name == "port_state"]
        rates = {(m.labels["ca"], m.labels["port"]): m for m in measurements if m.name == "port_rate"}
        judged = _judged_ports(states, t)
        if not judged:
            return _nothing_to_judge(states, t)
        findings: list[Finding] = []
        active = sum(_judge_port(m, rates.get((m.labels["ca"], m.labels["port"])), t, findings) for m in judged)
        if t.expected_ports is not None and active != t.expected_ports:
            findings.append(Finding(FAIL, f"{active} active ports, expected {t.expected_ports}"))
        exit_m = next((m for m in measurements if m.name == "ibstat_exit_code"), None)
        if exit_m is not None and exit_m.value:
            findings.append(_exit_finding(exit_m, len(judged), t))
        active_rates = _active_rates(judged, rates)
        rate_text = sorted({f"{r or 0:g}" for r in active_rates})
        pass_reason = f"{active} {t.link_layers} ports Active at {'/'.join(rate_text)} Gb/s"
        measurements += _summary_measurements(active, active_rates, t)
        unjudged = _unjudged_finding(pass_reason, t)
        if unjudged is not None:
            findings.append(unjudged)
        if not findings:
            findings.append(Finding(PASS, pass_reason))
        return Verdict.from_findings(findings, pass_reason=pass_reason)

    @classmethod
    def consensus(cls, per_node: dict[str, list[Measurement]]) -> dict[str, str]:
        """Without an expected port count or rate, a node is compared with the run's strict
        majority: fewer active ports, or a slower slowest port, than most nodes is the odd one out
        ("6 active InfiniBand ports, 7 of 8 nodes have 8"). A node never fails for having more."""
        return ib_consensus(per_node)


def _judged_ports(states: list[Measurement], t: IbThresholds) -> list[Measurement]:
    """The port states whose link layer is judged, on CAs not ignored."""
    layers = {x.lower() for x in split_list(t.link_layers)}
    ignored = set(split_list(t.ignore_cas))
    return [m for m in states if m.labels.get("link_layer", "").lower() in layers and m.labels["ca"] not in ignored]


def _active_rates(judged: list[Measurement], rates: dict[tuple[str, str], Measurement]) -> list[float | None]:
    """The rates of the judged ports that are Active (None where unreadable)."""
    return [
        rates[key].value for m in judged if m.text == "Active" and (key := (m.labels["ca"], m.labels["port"])) in rates
    ]


def _nothing_to_judge(states: list[Measurement], t: IbThresholds) -> Verdict:
    """The error when no listed port has a judged link layer, naming the layers that were seen."""
    seen = sorted({m.labels.get("link_layer") or "?" for m in states})
    what = f"{len(states)} ports, link layers {', '.join(seen)}" if states else "no ports listed"
    hint = "; RoCE fabrics need link_layers=InfiniBand,Ethernet" if "Ethernet" in seen else ""
    return Verdict(ERROR, f"no {t.link_layers} port to judge ({what}){hint}")


def _judge_port(m: Measurement, rate: Measurement | None, t: IbThresholds, findings: list[Finding]) -> bool:
    """Judge one port's state and rate (setting their threshold and ok), adding its findings; whether
    it is Active."""
    where = f"{m.labels['ca']} port {m.labels['port']}"
    m.threshold, m.ok = "== Active", m.text == "Active"
    if not m.text:
        findings.append(Finding(ERROR, f"{where}: state unreadable ({m.labels.get('missing')})"))
        return False
    if m.text != "Active":
        phys = m.labels.get("physical_state")
        findings.append(Finding(FAIL, f"{where}: {m.text}" + (f" ({phys})" if phys else "")))
        return False
    if t.expected_rate_gbps is None or rate is None:
        return True
    if rate.value is None:
        findings.append(Finding(ERROR, f"{where}: rate unreadable ({rate.labels.get('missing')})"))
        return True
    rate.threshold, rate.ok = f">= {t.expected_rate_gbps:g}", rate.value >= t.expected_rate_gbps
    if not rate.ok:
        findings.append(Finding(FAIL, f"{where}: {rate.value:g} Gb/s, expected {t.expected_rate_gbps:g}"))
    return True


def _exit_finding(exit_m: Measurement, judged: int, t: IbThresholds) -> Finding:
    """ibstat exited non-zero but printed ports: a warning when enough were readable, else an error."""
    said = f" ({exit_m.text})" if exit_m.text else ""
    readable = f"judged the {judged} readable {t.link_layers} ports"
    if t.expected_ports is not None and judged >= t.expected_ports:
        return Finding(WARN, f"ibstat exited {int(exit_m.value or 0)}{said}; {readable}")
    return Finding(ERROR, f"ibstat exited {int(exit_m.value or 0)}{said}; only {readable}")


def _summary_measurements(active: int, active_rates: list[float | None], t: IbThresholds) -> list[Measurement]:
    """What the run's majority is compared with (IbPorts.consensus), recorded with what judged it."""
    count = Measurement(name="ports_active", value=float(active), labels={"link_layers": t.link_layers})
    slowest = min((r for r in active_rates if r is not None), default=None)
    rate = Measurement(name="port_rate_min", value=slowest, unit="Gb/s", labels={"link_layers": t.link_layers})
    if t.expected_ports is not None:
        count.labels["expected"] = str(t.expected_ports)
        count.threshold, count.ok = f"== {t.expected_ports}", active == t.expected_ports
    if t.expected_rate_gbps is not None:
        rate.labels["expected"] = f"{t.expected_rate_gbps:g}"
    return [count, rate]


def _unjudged_finding(pass_reason: str, t: IbThresholds) -> Finding | None:
    """Without an expected port count or rate, what is only recorded: a warning at most, since the
    run's majority is the comparison (consensus)."""
    unjudged = [
        what for what, limit in (("port count", t.expected_ports), ("rate", t.expected_rate_gbps)) if limit is None
    ]
    if not unjudged:
        return None
    names = " and ".join(unjudged)
    settings = " / ".join(
        n for n, v in (("expected_ports", t.expected_ports), ("expected_rate_gbps", t.expected_rate_gbps))
        if v is None
    )  # fmt: skip
    return Finding(WARN, f"{pass_reason}: {names} not judged (no {settings} set); compared with the run's majority")


def ib_consensus(per_node: dict[str, list[Measurement]]) -> dict[str, str]:
    """hostname -> reason for nodes below the strict majority (see IbPorts.consensus). Nodes whose
    count or rate was already judged against an expected value are not compared again."""
    odd: dict[str, list[str]] = {}
    for name in IB_CONSENSUS_NAMES:
        values: dict[str, tuple[float, str]] = {}
        for host, measurements in per_node.items():
            m = next((x for x in measurements if x.name == name), None)
            if m is None or m.value is None or m.labels.get("expected"):
                continue
            values[host] = (m.value, m.labels.get("link_layers", ""))
        if len(values) < 2:
            continue
        top, count = Counter(v for v, _ in values.values()).most_common(1)[0]
        if count * 2 <= len(values):
            continue  # no strict majority: nothing to call odd
        for host, (value, layers) in sorted(values.items()):
            if value >= top:
                continue
            if name == "ports_active":
                why = f"{value:g} active {layers} ports, {count} of {len(values)} nodes have {top:g}"
            else:
                why = f"slowest active port at {value:g} Gb/s, {count} of {len(values)} nodes have {top:g} Gb/s"
            odd.setdefault(host, []).append(why)
    return {host: "; ".join(reasons) for host, reasons in odd.items()}
