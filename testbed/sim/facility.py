"""The testbed's facility: rack PDUs and coolant loops whose readings follow the nodes' load.

The model behind testbed/sim/redfish_facility.py (which serves it as Redfish). Its config is one
JSON file; node NAME's simulator state file is STATE_DIR/NAME/state (the testbed's layout,
testbed/cluster.py), and its power at this instant is testbed/sim/power.py's node_power(), the very
number the node's own `ipmitool dcmi power reading` prints (a node without a state file draws 0 W).

    {
      "username": "facility", "password": "...",          # HTTP basic auth of the service
      "pdus": [{
        "id": "r1-a", "name": "Rack 1 PDU A", "rack": "r1",
        "phases": 3,                 # 1 or 3
        "voltage_v": 230,            # line-to-neutral voltage of each phase
        "rated_current_a": 32,       # breaker rating of each phase (RatedCurrentAmps)
        "circuit": "AC1",            # optional: the Mains circuit's id (default AC1)
        "frequency_hz": 50,          # optional (default 50)
        "outlet_rated_current_a": 16,  # optional (default 16)
        "feeds": [{"node": "gpu01", "phase": 1, "share": 0.5}, ...],
        "miscabled": {"phase": 2, "nodes": ["gpu03"], "extra_current_a": 0}   # optional fault
      }],
      "cdus": [{
        "id": "loop1", "name": "Loop 1 CDU",
        "nodes": ["gpu01", "gpu02"],
        "flow_lpm": 120,             # nominal primary flow, L/min
        "supply_c": 30,              # optional (default 30)
        "capture": 0.9,              # optional: share of the nodes' power the liquid takes (default 0.9)
        "density_kg_per_l": 0.9957, "specific_heat_kj_per_kg_k": 4.178,   # optional (water at 30 C)
        "low_flow": 0.3              # optional fault: the flow is this fraction of nominal
      }]
    }

PDU phases. A feed puts `share` of a node's power on `phase` of that PDU (a node with two PSU
groups on an A and a B PDU has two feeds of 0.5). Phase power = sum(node power x share); phase
current = phase power / voltage_v (power factor 1: server PSUs correct it actively, 80 PLUS asks
for >= 0.9 at full load, so the simulator ignores reactive power). The fault `miscabled` moves the
listed nodes' feeds of this PDU onto `phase` (cabled there, whatever the facility model says) and
adds `extra_current_a` amps of unrecorded load on it: that phase alone carries more.

Coolant loops. The liquid takes heat = capture_eff x (sum of the loop's node power), where
capture_eff = capture x min(1, flow / flow_lpm) ** 0.8: the cold plates' heat transfer coefficient
scales with flow ** 0.8 (Dittus-Boelter, Nu ~ Re^0.8; Incropera, Fundamentals of Heat and Mass
Transfer, eq. 8.60), so at lower flow less of the heat reaches the liquid and the rest goes to the
room's air. Return = supply + heat / (flow x density x specific heat). The fault `low_flow` (e.g.
0.3) scales the flow: the return temperature rises (less flow for the heat still captured) and the
captured share falls (0.9 x 0.3 ** 0.8 = 34% of node power, below the soak's 80% DLC rule).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.sim.power import node_power

# Water at 30 C, 1 atm: density 995.65 kg/m3 (Engineering ToolBox, "Water - Density, Specific
# Weight and Thermal Expansion Coefficients", https://www.engineeringtoolbox.com/water-density-specific-weight-d_595.html)
# and isobaric specific heat 4.178 kJ/(kg K) (Engineering ToolBox, "Water - Specific Heat vs.
# Temperature", https://www.engineeringtoolbox.com/specific-heat-capacity-water-d_660.html).
WATER_DENSITY_KG_PER_L = 0.9957
WATER_SPECIFIC_HEAT_KJ_PER_KG_K = 4.178
# Facility water supply: ASHRAE TC 9.9 liquid cooling class W32 allows up to 32 C supply; 30 C is
# the DMTF public-cooling-unit mockup's primary supply reading (tests/fixtures/redfish-cdu/).
SUPPLY_C = 30.0
# The healthy loop's liquid share of node power: ~0.9 (DLC HGX designs capture ~80-90%), above the 80% rule.
CAPTURE = 0.9
# Dittus-Boelter exponent (Nu ~ Re^0.8, turbulent flow): heat transfer against flow.
FLOW_EXPONENT = 0.8
# Mains frequency: IEC 60038 (230/400 V systems, 50 Hz).
FREQUENCY_HZ = 50.0
# An IEC 60320 C19 outlet, what HGX PSUs plug into, is rated 16 A.
OUTLET_RATED_A = 16.0
# The DMTF public-pdu mockup names its mains circuit AC1.
CIRCUIT = "AC1"

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class ConfigError(ValueError):
    """The facility config is not usable; the message says where."""


@dataclass(frozen=True)
class Feed:
    node: str
    phase: int
    share: float


@dataclass(frozen=True)
class Miscabling:
    phase: int
    nodes: tuple[str, ...]
    extra_current_a: float


@dataclass(frozen=True)
class Pdu:
    id: str
    name: str
    rack: str
    phases: int
    voltage_v: float
    rated_current_a: float
    circuit: str
    frequency_hz: float
    outlet_rated_current_a: float
    feeds: tuple[Feed, ...]
    miscabled: Miscabling | None


@dataclass(frozen=True)
class Loop:
    id: str
    name: str
    nodes: tuple[str, ...]
    flow_lpm: float
    supply_c: float
    capture: float
    density_kg_per_l: float
    specific_heat_kj_per_kg_k: float
    low_flow: float  # 1.0: healthy


@dataclass(frozen=True)
class Facility:
    username: str
    password: str
    pdus: tuple[Pdu, ...]
    loops: tuple[Loop, ...]

    def nodes(self) -> set[str]:
        return (
            {f.node for p in self.pdus for f in p.feeds}
            | {n for p in self.pdus if p.miscabled for n in p.miscabled.nodes}
            | {n for loop in self.loops for n in loop.nodes}
        )


# ----------------------------------------------------------------------------- config


def _number(doc: dict[str, Any], key: str, where: str, default: float | None = None, *, low: float = 0.0) -> float:
    value = doc.get(key, default)
    if value is None:
        raise ConfigError(f"{where}: '{key}' is required")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < low:
        raise ConfigError(f"{where}: '{key}' must be a finite number >= {low:g}, got {value!r}")
    return float(value)


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise ConfigError(f"{where}: {value!r} is not a name (letters, digits, '.', '_', '-')")
    return value


def _text(doc: dict[str, Any], key: str, where: str, default: str) -> str:
    value = doc.get(key, default)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: '{key}' must be a string")
    return value


def _phase(value: Any, phases: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= phases:
        raise ConfigError(f"{where}: phase must be 1..{phases}, got {value!r}")
    return value


def _feeds(doc: dict[str, Any], phases: int, where: str) -> tuple[Feed, ...]:
    feeds = doc.get("feeds", [])
    if not isinstance(feeds, list):
        raise ConfigError(f"{where}: 'feeds' must be a list")
    out = []
    for i, feed in enumerate(feeds):
        at = f"{where} feed {i + 1}"
        if not isinstance(feed, dict):
            raise ConfigError(f"{at}: must be an object")
        share = _number(feed, "share", at, 1.0)
        if not 0.0 < share <= 1.0:
            raise ConfigError(f"{at}: 'share' must be in (0, 1], got {share:g}")
        out.append(Feed(node=_name(feed.get("node"), at), phase=_phase(feed.get("phase", 1), phases, at), share=share))
    return tuple(out)


def _miscabling(doc: dict[str, Any], phases: int, where: str) -> Miscabling | None:
    fault = doc.get("miscabled")
    if fault is None:
        return None
    at = f"{where} miscabled"
    if not isinstance(fault, dict):
        raise ConfigError(f"{at}: must be an object")
    nodes = fault.get("nodes", [])
    if not isinstance(nodes, list):
        raise ConfigError(f"{at}: 'nodes' must be a list")
    return Miscabling(
        phase=_phase(fault.get("phase"), phases, at),
        nodes=tuple(_name(n, at) for n in nodes),
        extra_current_a=_number(fault, "extra_current_a", at, 0.0),
    )


def _pdu(doc: Any, index: int) -> Pdu:
    where = f"pdus[{index}]"
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: must be an object")
    pdu_id = _name(doc.get("id"), where)
    where = f"PDU {pdu_id}"
    phases = doc.get("phases")
    if phases not in (1, 3) or isinstance(phases, bool):
        raise ConfigError(f"{where}: 'phases' must be 1 or 3, got {phases!r}")
    return Pdu(
        id=pdu_id,
        name=_text(doc, "name", where, pdu_id),
        rack=_text(doc, "rack", where, ""),
        phases=phases,
        voltage_v=_number(doc, "voltage_v", where, low=1.0),
        rated_current_a=_number(doc, "rated_current_a", where, low=0.1),
        circuit=_name(doc.get("circuit", CIRCUIT), where),
        frequency_hz=_number(doc, "frequency_hz", where, FREQUENCY_HZ, low=1.0),
        outlet_rated_current_a=_number(doc, "outlet_rated_current_a", where, OUTLET_RATED_A, low=0.1),
        feeds=_feeds(doc, phases, where),
        miscabled=_miscabling(doc, phases, where),
    )


def _loop(doc: Any, index: int) -> Loop:
    where = f"cdus[{index}]"
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: must be an object")
    loop_id = _name(doc.get("id"), where)
    where = f"CDU {loop_id}"
    nodes = doc.get("nodes", [])
    if not isinstance(nodes, list):
        raise ConfigError(f"{where}: 'nodes' must be a list")
    capture = _number(doc, "capture", where, CAPTURE)
    low_flow = _number(doc, "low_flow", where, 1.0)
    if capture > 1.0 or not 0.0 < low_flow <= 1.0:
        raise ConfigError(f"{where}: 'capture' must be <= 1 and 'low_flow' in (0, 1]")
    return Loop(
        id=loop_id,
        name=_text(doc, "name", where, loop_id),
        nodes=tuple(_name(n, where) for n in nodes),
        flow_lpm=_number(doc, "flow_lpm", where, low=0.001),
        supply_c=_number(doc, "supply_c", where, SUPPLY_C, low=-50.0),
        capture=capture,
        density_kg_per_l=_number(doc, "density_kg_per_l", where, WATER_DENSITY_KG_PER_L, low=0.001),
        specific_heat_kj_per_kg_k=_number(
            doc, "specific_heat_kj_per_kg_k", where, WATER_SPECIFIC_HEAT_KJ_PER_KG_K, low=0.001
        ),
        low_flow=low_flow,
    )


def _unique(ids: list[str], what: str) -> None:
    seen = {i for i in ids if ids.count(i) > 1}
    if seen:
        raise ConfigError(f"duplicate {what} id(s): {', '.join(sorted(seen))}")


def parse_config(text: str) -> Facility:
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise ConfigError(f"not JSON: {err}") from err
    if not isinstance(doc, dict):
        raise ConfigError("the config must be a JSON object")
    username, password = doc.get("username"), doc.get("password")
    if not isinstance(username, str) or not username or ":" in username:
        raise ConfigError("'username' must be a non-empty string without ':'")
    if not isinstance(password, str) or not password:
        raise ConfigError("'password' must be a non-empty string")
    pdus, loops = doc.get("pdus", []), doc.get("cdus", [])
    if not isinstance(pdus, list) or not isinstance(loops, list):
        raise ConfigError("'pdus' and 'cdus' must be lists")
    facility = Facility(
        username=username,
        password=password,
        pdus=tuple(_pdu(p, i) for i, p in enumerate(pdus)),
        loops=tuple(_loop(c, i) for i, c in enumerate(loops)),
    )
    _unique([p.id for p in facility.pdus], "PDU")
    _unique([c.id for c in facility.loops], "CDU")
    return facility


def load_config(path: Path) -> Facility:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read {path}: {err}") from err
    return parse_config(text)


# ----------------------------------------------------------------------------- readings


def node_powers(state_dir: Path, nodes: set[str], now: float | None = None) -> dict[str, float]:
    """Each node's power now (W), from STATE_DIR/NODE/state, as its `ipmitool dcmi` would read it.
    A node without a state file draws nothing (not up, or a name the config misspells: its phase
    and loop show the missing load)."""
    out: dict[str, float] = {}
    for node in sorted(nodes):
        state = Path(state_dir) / node / "state"
        out[node] = node_power(state, now).total_w if state.is_file() else 0.0
    return out


@dataclass(frozen=True)
class Phase:
    number: int
    voltage_v: float
    power_w: float

    @property
    def current_a(self) -> float:
        return self.power_w / self.voltage_v


def phase_readings(pdu: Pdu, powers: dict[str, float]) -> list[Phase]:
    """Power and current of each phase of the PDU's mains, miscabling included."""
    watts = {n: 0.0 for n in range(1, pdu.phases + 1)}
    moved = set(pdu.miscabled.nodes) if pdu.miscabled else set()
    for feed in pdu.feeds:
        phase = pdu.miscabled.phase if pdu.miscabled and feed.node in moved else feed.phase
        watts[phase] += powers.get(feed.node, 0.0) * feed.share
    if pdu.miscabled:
        watts[pdu.miscabled.phase] += pdu.miscabled.extra_current_a * pdu.voltage_v
    return [Phase(number=n, voltage_v=pdu.voltage_v, power_w=w) for n, w in sorted(watts.items())]


def neutral_current(phases: list[Phase]) -> float:
    """|I1 + I2 a + I3 a^2| of a wye with resistive loads (a = 120 degrees): 0 when balanced."""
    if len(phases) != 3:
        return 0.0
    i1, i2, i3 = (p.current_a for p in phases)
    return math.sqrt(max(0.0, i1 * i1 + i2 * i2 + i3 * i3 - i1 * i2 - i2 * i3 - i3 * i1))


@dataclass(frozen=True)
class LoopReading:
    flow_lpm: float
    supply_c: float
    return_c: float
    heat_w: float
    node_power_w: float

    @property
    def capture(self) -> float:
        return self.heat_w / self.node_power_w if self.node_power_w > 0 else 0.0


def loop_reading(loop: Loop, powers: dict[str, float]) -> LoopReading:
    """Flow, supply/return temperature and the heat the liquid removes, from the loop's node power."""
    flow = loop.flow_lpm * loop.low_flow
    capture = loop.capture * min(1.0, flow / loop.flow_lpm) ** FLOW_EXPONENT
    load = sum(powers.get(n, 0.0) for n in loop.nodes)
    heat = capture * load
    # W / (L/s x kg/L x J/(kg K)) = K
    rise = heat / (flow / 60.0 * loop.density_kg_per_l * loop.specific_heat_kj_per_kg_k * 1000.0)
    return LoopReading(
        flow_lpm=flow, supply_c=loop.supply_c, return_c=loop.supply_c + rise, heat_w=heat, node_power_w=load
    )
