"""checks/core/evidence.py: the one layer that turns impossible values into `error` for every check."""

from __future__ import annotations

import ast
import inspect
import math

import pytest

import checks  # noqa: F401  (fills the registry)
from checks.core import evidence
from checks.core.base import REGISTRY, Measurement
from checks.core.evidence import COUNT, FLAG, UNIT_RULES, Rule, check_value, problems, reason


@pytest.mark.parametrize(
    ("m", "why"),
    [
        (Measurement("busbw_peak", float("inf"), "GB/s"), "busbw_peak = inf GB/s (must be finite)"),
        (Measurement("busbw_peak", 1e308, "GB/s"),
         "busbw_peak = 1e+308 GB/s (a bandwidth must be a number in 0..20000)"),
        (Measurement("temp", float("nan"), "C", gpu=2), "GPU 2 temp = nan C (must be finite)"),
        (Measurement("temp_max", 151.0, "C", gpu=0),
         "GPU 0 temp_max = 151 C (a temperature must be a number in -40..150)"),
        (Measurement("port_rate", -1.0, "Gb/s", labels={"ca": "mlx5_0", "port": "1"}),
         "port_rate (ca=mlx5_0, port=1) = -1 Gb/s (a link rate must be a number in 0..3200)"),
        (Measurement("gpus", 2.5, "GPUs"), "gpus = 2.5 GPUs (a GPU count must be an integer in 0..4096)"),
        (Measurement("x", True), "x = True (not a number)"),  # type: ignore[arg-type]
        (Measurement("x", "12"), "x = '12' (not a number)"),  # type: ignore[arg-type]
    ],
)  # fmt: skip
def test_it_names_the_measurement_the_place_and_the_value(m: Measurement, why: str) -> None:
    assert check_value(m) == why


def test_missing_is_not_impossible() -> None:
    assert problems([Measurement("busbw_peak", None, "GB/s", labels={"missing": "no row"})]) == []


def test_a_check_rule_by_name_wins_over_the_unit_rule() -> None:
    sentinel = Rule("an iteration count", low=-1, integer=True)
    m = Measurement("iterations", -1.0)
    assert check_value(m, {"iterations": sentinel}) is None
    assert check_value(Measurement("errors", -1.0), {"errors": COUNT}) == (
        "errors = -1 (a count must be a non-negative integer)"
    )
    assert check_value(Measurement("errors", 2.0**70), {"errors": COUNT}) == (
        "errors = 1.18059e+21 (a count must fit a 64-bit counter (at most 2^64 - 1))"
    )
    assert check_value(Measurement("flag", 2.0), {"flag": FLAG}) == "flag = 2 (a flag must be an integer in 0..1)"


def test_values_without_a_rule_must_still_be_finite() -> None:
    assert check_value(Measurement("whatever", -5.0)) is None
    assert check_value(Measurement("whatever", -math.inf)) == "whatever = -inf (must be finite)"


def test_the_reason_lists_five_and_counts_the_rest() -> None:
    found = [f"m{i} = nan (must be finite)" for i in range(7)]
    assert reason(found) == "impossible evidence: " + "; ".join(found[:5]) + "; and 2 more"


def test_the_realistic_extremes_are_possible() -> None:
    # The fastest hardware there is must never read as impossible (each bound's source is in evidence.py).
    for m in (
        Measurement("busbw", 900.0, "GB/s"),  # NVLink 5 per direction
        Measurement("hbm", 8000.0, "GB/s"),  # B200 HBM3e
        Measurement("rate", 800.0, "Gb/s"),  # InfiniBand XDR
        Measurement("gflops", 2.25e6, "Gflop/s"),  # B200 sparse TF32
        Measurement("fs", 1e13, "B/s"),  # Frontier Orion, ~10 TB/s
        Measurement("temp", -10.0, "C"),
        Measurement("temp", 95.0, "C"),
        Measurement("power", 132_000.0, "W"),  # an NVL72 rack
    ):
        assert check_value(m) is None, m


def test_every_bound_carries_a_source_comment() -> None:
    source = inspect.getsource(evidence)
    lines = source.splitlines()
    tree = ast.parse(source)
    rules = next(
        node for node in tree.body if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "UNIT_RULES"
    )
    assert isinstance(rules.value, ast.Dict)
    uncommented = []
    for key, value in zip(rules.value.keys, rules.value.values, strict=True):
        numbers = [n for n in ast.walk(value) if isinstance(n, ast.Constant) and isinstance(n.value, (int, float))]
        if not [n for n in numbers if not isinstance(n.value, bool) and n.value not in (0, 0.0)]:
            continue  # only non-negative / integer: no number to source
        line = value.lineno - 1
        above = lines[line]
        i = line - 1
        while i >= 0 and lines[i].strip().startswith("#"):
            above += lines[i]
            i -= 1
        if "#" not in above:
            uncommented.append(key.value if isinstance(key, ast.Constant) else "?")
    assert uncommented == []


def test_every_declared_rule_names_a_unit_or_measurement_the_check_may_record() -> None:
    for key, cls in REGISTRY.items():
        for name, rule in cls.evidence.items():
            assert isinstance(rule, Rule), (key, name)
            assert rule.low is None or rule.high is None or rule.low <= rule.high, (key, name)
    assert set(UNIT_RULES) >= evidence.QUANTITY_UNITS
