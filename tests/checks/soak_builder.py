"""A synthetic heat soak for tests/checks/test_power_soak_judge.py: 12 nodes in 3 racks, 6 PDUs (an A
and a B PDU per rack, 3-phase, 230 V, 63 A), one UPS and one water loop, 120 s at 1 Hz, and the
four faults a soak must catch (a node drawing 30% over its GPUs, a phase overloaded by
mis-cabling, a low-flow loop, an undersized UPS) as switches."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from checks.soak.physics import FLUIDS

RACKS = ("r1", "r2", "r3")
HOSTS = tuple(f"gpu{i:02d}" for i in range(1, 13))
N = 120
VOLTS = 230.0
TRUE_PF = 0.98  # what the simulated PSUs draw at; the judge assumes 0.95 (the safe side)
SUPPLY_C = 30.0


def rack_of(host: str) -> str:
    return RACKS[(int(host[3:]) - 1) // 4]


def load_factor(i: int) -> float:
    """Idle for 5 s, a ramp to full load by 15 s, then full load with a 1% ripple."""
    if i < 5:
        return 0.1
    if i < 15:
        return 0.1 + 0.9 * (i - 5) / 10
    return 1.0 + 0.01 * math.sin(i / 3.0)


@dataclass
class Soak:
    """Switches for the planted faults; build() returns (facility, samples)."""

    over_drawing: str = ""  # this node draws 30% over (its GPUs + platform)
    mis_cabled: str = ""  # this PDU's phase 2 carries most of its load (measured)
    low_flow: bool = False
    ups_capacity_w: float = 120_000.0
    measured_pdus: tuple[str, ...] = ("pdu-r2-a", "pdu-r2-b")
    b_breaker_a: dict[str, float] = field(default_factory=dict)  # rack -> B PDU breaker rating

    def gpu_full(self, host: str) -> float:
        """8 GPUs near 690 W, spread 5.3-5.6 kW across the fleet (a healthy spread)."""
        return 5300.0 + 300.0 * ((int(host[3:]) * 7) % 12) / 11

    def platform_full(self, host: str) -> float:
        """Non-GPU draw under load, spread 1.2-1.8 kW across the fleet (a healthy spread)."""
        return 1200.0 + 600.0 * ((int(host[3:]) * 5) % 12) / 11

    def node_series(self, host: str) -> tuple[list[float], list[float]]:
        node, gpu = [], []
        for i in range(N):
            f = load_factor(i)
            g = self.gpu_full(host) * f
            p = g + 800.0 + (self.platform_full(host) - 800.0) * f
            if host == self.over_drawing:
                p *= 1.3
            node.append(p)
            gpu.append(g)
        return node, gpu

    def facility(self) -> dict[str, Any]:
        pdus = []
        for rack in RACKS:
            for feed in ("A", "B"):
                name = f"pdu-{rack}-{feed.lower()}"
                breaker = self.b_breaker_a.get(rack, 63.0) if feed == "B" else 63.0
                pdus.append({"name": name, "rack": rack, "feed": feed, "phases": 3, "voltage_v": VOLTS,
                             "breaker_a": [breaker] * 3, "has_endpoint": name in self.measured_pdus})  # fmt: skip
        feeds = [
            {"node": h, "pdu": f"pdu-{rack_of(h)}-{f}", "phase": k, "share": 1 / 6}
            for h in HOSTS
            for f in ("a", "b")
            for k in (1, 2, 3)
        ]
        racks = [
            {"name": r, "power_budget_w": 40_000.0, "cooling_budget_w": 40_000.0, "room": "hall1", "row": "A",
             "position": i}
            for i, r in enumerate(RACKS)
        ]  # fmt: skip
        return {
            "racks": racks,
            "pdus": pdus,
            "feeds": feeds,
            "ups": [{"name": "ups1", "capacity_w": self.ups_capacity_w, "racks": list(RACKS)}],
            "loops": [{"name": "cdu1", "racks": list(RACKS), "fluid": "water", "has_endpoint": True}],
            "nodes": {h: rack_of(h) for h in HOSTS},
        }

    def samples(self) -> dict[str, Any]:
        series = {h: self.node_series(h) for h in HOSTS}
        return {
            "t": [1_700_000_000.0 + i for i in range(N)],
            "node_power_w": {h: list(s[0]) for h, s in series.items()},
            "gpu_power_w": {h: list(s[1]) for h, s in series.items()},
            "gpu_count": dict.fromkeys(HOSTS, 8),
            "phase_current_a": {pdu: self.phase_currents(pdu, series) for pdu in self.measured_pdus},
            "loops": {"cdu1": self.loop(series)},
        }

    def phase_currents(self, pdu: str, series: dict[str, tuple[list[float], list[float]]]) -> dict[str, list[float]]:
        hosts = [h for h in HOSTS if pdu.startswith(f"pdu-{rack_of(h)}-")]
        per_phase = [sum(series[h][0][i] for h in hosts) / 6 / (VOLTS * TRUE_PF) for i in range(N)]
        weights = (0.2, 2.6, 0.2) if pdu == self.mis_cabled else (1.0, 1.0, 1.0)
        return {str(k): [w * a for a in per_phase] for k, w in zip((1, 2, 3), weights, strict=True)}

    def loop(self, series: dict[str, tuple[list[float], list[float]]]) -> dict[str, list[float]]:
        """The CDU's readings: the liquid takes 88% of the nodes' power (55% with low flow)."""
        flow, capture = (40.0, 0.55) if self.low_flow else (110.0, 0.88)
        water = FLUIDS["water"]
        per_kelvin = flow / 60 * water.density_kg_l * water.specific_heat_j_kgk
        total = [sum(s[0][i] for s in series.values()) for i in range(N)]
        return {
            "supply_c": [SUPPLY_C] * N,
            "return_c": [SUPPLY_C + capture * p / per_kelvin for p in total],
            "flow_lpm": [flow] * N,
        }

    def build(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.facility(), self.samples()


def flat_soak(power: dict[str, list[float]], racks: dict[str, str], ups_w: float) -> tuple[dict, dict]:
    """A bare facility (racks with generous budgets, one UPS over all of them, no PDUs or loops) and
    samples carrying the given node power series, GPUs at 75% of it."""
    names = sorted(set(racks.values()))
    n = len(next(iter(power.values())))
    facility = {
        "racks": [{"name": r, "power_budget_w": 1e6, "cooling_budget_w": 1e6} for r in names],
        "pdus": [], "feeds": [], "loops": [],
        "ups": [{"name": "ups1", "capacity_w": ups_w, "racks": names}],
        "nodes": dict(racks),
    }  # fmt: skip
    samples = {
        "t": [float(i) for i in range(n)],
        "node_power_w": {h: list(v) for h, v in power.items()},
        "gpu_power_w": {h: [0.75 * x for x in v] for h, v in power.items()},
        "gpu_count": dict.fromkeys(power, 8),
    }
    return facility, samples
