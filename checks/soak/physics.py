"""Facility physics for the power-and-cooling acceptance (the `power-soak` heat soak): coolant
properties, the heat a liquid loop carries away, branch-circuit currents and capacities, phase
imbalance, and the bounds beyond which a reading is a misread, not a machine.

Pure functions on floats; every number has its source. Units: W, A, V, L/min, degrees C.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fluid:
    """A coolant's properties at the stated temperature: density in kg/L, specific heat in J/(kg K)."""

    name: str
    density_kg_l: float
    specific_heat_j_kgk: float
    at_c: float
    source: str


FLUIDS: dict[str, Fluid] = {
    # Liquid water at 30 C, 1 atm (a typical DLC secondary-loop temperature, ASHRAE W32 class
    # supply): 995.65 kg/m3 and 4.180 kJ/(kg K), IAPWS-95 as tabulated by the NIST Chemistry
    # WebBook (fluid properties of water); Incropera's Table A.6 gives the same to 0.1%.
    "water": Fluid("water", 0.9957, 4180.0, 30.0, "IAPWS-95 / NIST Chemistry WebBook, liquid water at 30 C"),
    # 25% (by volume) propylene glycol in water at 30 C: specific gravity 1.020 at 15.6 C (Marks'
    # Standard Handbook, Table 5.13 "Compositions of aqueous antifreeze solutions"), about 1.015 kg/L
    # warm; specific heat about 0.94 Btu/(lb F) = 3.93 kJ/(kg K) (Dow, Engineering and Operating Guide
    # for DOWFROST, specific heat of 25% solutions at 80-100 F). Both within ~1% of ASHRAE Handbook
    # Fundamentals ch. 31 (secondary coolants), far below the 20% margin of the capture rule.
    "pg25": Fluid(
        "PG25", 1.015, 3930.0, 30.0, "Dow DOWFROST engineering guide / ASHRAE Fundamentals ch. 31, PG25 at 30 C"
    ),
}

# Plausibility bounds: a reading beyond them was never taken from working equipment; such a
# reading makes its subject `error` (could not tell), never pass or fail.
# 100 kW per node: 7x the largest 8-GPU node's rated maximum (DGX B200: ~14.3 kW max, NVIDIA DGX
# B200 datasheet; DGX H100/H200 10.2 kW).
MAX_NODE_POWER_W = 100_000.0
# One GPU draws at most ~1.4 kW (GB300); checks/power/limit.py bounds an enforced limit at 2 kW a GPU.
MAX_GPU_POWER_W = 2000.0
# 1,000 A per phase: 16x the largest rack PDU input (63 A per phase, IEC 60309 3P+N+E 63 A plugs).
MAX_PHASE_CURRENT_A = 1000.0
# 10,000 L/min: 3.5x the flow of a 2 MW CDU at a 10 K rise (2e6 W / (4180 J/(kg K) x 10 K) = 48 kg/s,
# about 2,900 L/min); the largest row CDUs sold are rated near 2 MW.
MAX_FLOW_LPM = 10_000.0
# Coolant temperatures: the "C" rule of checks/core/evidence.py (-40 C .. 150 C).
MIN_COOLANT_C = -40.0
MAX_COOLANT_C = 150.0


def heat_removed_w(flow_lpm: float, supply_c: float, return_c: float, fluid: Fluid) -> float:
    """Heat the liquid carries away: mass flow x specific heat x (return - supply), in W."""
    mass_flow_kg_s = flow_lpm / 60.0 * fluid.density_kg_l
    return mass_flow_kg_s * fluid.specific_heat_j_kgk * (return_c - supply_c)


def phase_current_a(power_w: float, voltage_v: float, power_factor: float) -> float:
    """Line current of a load connected phase-to-neutral: I = P / (V x PF)."""
    return power_w / (voltage_v * power_factor)


def continuous_limit_a(breaker_a: float, continuous_fraction: float) -> float:
    """The most current a branch may carry continuously (NEC 210.19/210.20: 80% of the rating)."""
    return breaker_a * continuous_fraction


def feed_capacity_w(pdus: list[tuple[float, list[float]]], continuous_fraction: float, power_factor: float) -> float:
    """Real power a feed's PDUs may carry continuously: the sum over their phases of
    V x breaker x continuous fraction x power factor. `pdus`: (phase-to-neutral voltage, breaker A per phase)."""
    return sum(v * a * continuous_fraction * power_factor for v, breakers in pdus for a in breakers)


def phase_deviations(currents: dict[str, float]) -> dict[str, float] | None:
    """Each phase's deviation from the mean phase current, as a fraction of the mean (NEMA MG-1
    14.36's unbalance: max deviation from the average / the average); None when the mean is 0."""
    if not currents:
        return None
    mean = sum(currents.values()) / len(currents)
    if mean <= 0:
        return None
    return {phase: (value - mean) / mean for phase, value in currents.items()}


def fluid_for(name: object) -> Fluid | None:
    """The coolant named in the facility model ('water', 'pg25'; case-insensitive), or None."""
    if not isinstance(name, str):
        return None
    return FLUIDS.get(name.strip().lower())
