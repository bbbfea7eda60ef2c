"""Measurement ranges split by phase, for the certificate PDF only (not part of the signed body).

The body's ranges (summary.Gathered) pool every value of a (check, measurement, unit, threshold) over
the nodes; a measurement recorded once per phase (the thermal check's temp_gpu_steady idle and under
load) then reads as one range from the idle minimum to the load maximum. The PDF shows such a
measurement as one row per phase instead, each against the threshold it was judged by, read here
from the cited node results' measurements. Presentation only: the body, its digest and every
signature over it are untouched."""

from __future__ import annotations

import math
from collections.abc import Iterable
from statistics import median
from typing import Any

from portal.certificates.evidence import CHUNK
from portal.runs.models import Measurement

# (plan item key, measurement name, unit, threshold) -> one range per phase, phases in name order.
PhaseRanges = dict[tuple[str, str, str, str], list[dict[str, Any]]]


def phase_ranges(result_ids: Iterable[int]) -> PhaseRanges:
    """Ranges per phase of the judged measurements (a threshold, a value) labelled with a phase, for
    each (item, name, unit, threshold) recorded in two phases or more."""
    values: dict[tuple[str, str, str, str], dict[str, list[float]]] = {}
    ids = sorted(set(result_ids))
    for chunk in (ids[start : start + CHUNK] for start in range(0, len(ids), CHUNK)):
        rows = (
            Measurement.objects.filter(result_id__in=chunk, value__isnull=False, labels__has_key="phase")
            .exclude(threshold="")
            .values_list("result__item_key", "name", "unit", "threshold", "labels__phase", "value")
        )
        for item_key, name, unit, threshold, phase, value in rows.iterator(chunk_size=2000):
            if value is not None and math.isfinite(value):
                values.setdefault((item_key, name, unit, threshold), {}).setdefault(str(phase), []).append(value)
    return {
        key: [
            {"phase": phase, "n": len(v), "min": min(v), "median": median(v), "max": max(v)}
            for phase, v in sorted(by_phase.items())
        ]
        for key, by_phase in values.items()
        if len(by_phase) > 1
    }
