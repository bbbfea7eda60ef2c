"""What the cross-node checks read of one result, kept with the result when it is recorded.

Closing a run compares its nodes: consensus (`Check.consensus` over the facts its check declares,
`consensus_names`) and fleet outliers (each `OutlierMetric`'s one value per node). Both read a
handful of a result's measurements, and a node task has them in hand when it records the result;
reading them back at the close meant an index probe per result over every one of its rows, on the
one thread that closes the run (~180k rows at 1,250 nodes x 20 checks). So the node task stores
them as the result's `cross_node` digest, in the UPDATE that finishes it:

    {"facts": [[name, value, unit, gpu, text, threshold, ok, labels], ...],   # in stored order
     "metrics": {metric key: value or null}}

from the measurements exactly as they are stored (cut and made storable), so the close sees what
reading the rows back would have given. A result recorded without one (by an older Kiln) is read
from its measurements instead (portal/runs/finalize.py). Pure functions: no queries.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import Any

from checks.core.base import REGISTRY, Check
from checks.core.base import Measurement as CheckMeasurement
from portal.runs import outliers

# A stored measurement as measurements_write stores it: name, value, text, unit, gpu, threshold,
# ok, labels (portal/runs/services.py stored_measurements).
Stored = tuple[str, float | None, str, str, int | None, str, bool | None, dict[str, Any]]


def agrees(check_class: type[Check]) -> bool:
    """The kind overrides Check's consensus: it has something to agree on."""
    return inspect.getattr_static(check_class, "consensus") is not inspect.getattr_static(Check, "consensus")


def consensus_of(kind: str) -> tuple[type[Check], frozenset[str] | None] | None:
    """The kind's check and the names its consensus reads (None: every row), when it has one."""
    check_class = REGISTRY.get(kind)
    if check_class is None or not agrees(check_class):
        return None
    return check_class, check_class.consensus_names


def stored_order(gpu: int | None, name: str, position: int) -> tuple[bool, int, str, int]:
    """A fact's place in the order the close reads facts in: by GPU, GPU-less rows last (as
    PostgreSQL sorts NULLs), then name, then `position` (its id, or its index in the result's rows,
    which is the order its ids were given in)."""
    return (gpu is None, gpu or 0, name, position)


def digest(kind: str, rows: Sequence[Stored]) -> dict[str, Any] | None:
    """The cross-node digest of a node result of `kind` with these stored measurements; None when
    no cross-node check reads the kind (or its consensus reads every row: then the close reads them)."""
    agreed = consensus_of(kind)
    metrics = outliers.METRICS.get(kind, ())
    if agreed is None and not metrics:
        return None
    if agreed is not None and agreed[1] is None:
        return None
    found: dict[str, Any] = {}
    if agreed is not None:
        names = agreed[1] or frozenset()
        picked = [(i, row) for i, row in enumerate(rows) if row[0] in names]
        picked.sort(key=lambda p: stored_order(p[1][4], p[1][0], p[0]))
        # Values as the float column gives them back (8 -> 8.0), NaN and infinities as null (JSON has none).
        found["facts"] = [
            [n, finite(v), unit, gpu, text, threshold, ok, labels]
            for _, (n, v, text, unit, gpu, threshold, ok, labels) in picked
        ]
    if metrics:
        read_names = {name for metric in metrics for name in metric.names}
        read = [{"name": r[0], "value": r[1], "gpu": r[4], "labels": r[7]} for r in rows if r[0] in read_names]
        found["metrics"] = {metric.key: finite(metric.read(read)) for metric in metrics}
    return found


def finite(value: float | None) -> float | None:
    """A value as JSON keeps it: a float, NaN and infinities as null (a judged result, the only kind
    the close reads, never holds them: checks/core/evidence.py; the outlier test leaves
    NaN out anyway)."""
    if value is None:
        return None
    try:
        real = float(value)
    except OverflowError:  # an int past a float's range: infinite as stored
        return None
    return real if math.isfinite(real) else None


def facts(stored: dict[str, Any]) -> list[CheckMeasurement]:
    """A digest's consensus facts as the check's Measurements, in stored order."""
    return [
        CheckMeasurement(name=n, value=v, unit=unit, gpu=gpu, text=text, threshold=threshold, ok=ok, labels=labels)
        for n, v, unit, gpu, text, threshold, ok, labels in stored.get("facts", ())
    ]
