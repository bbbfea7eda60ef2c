"""A result's declared per-GPU counters (ECC) and events (Xid) as a table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from checks import presentation_of
from portal.runs.models import CheckResult, Measurement


def in_ecc_table(kind: str) -> Callable[[Measurement], bool] | None:
    """For a result whose kind declares a counter table (checks/core/presentation.py CounterTable): which
    of its measurements the table shows (the per-GPU counters and every event), so the result page's
    own measurement table leaves them out instead of showing them twice. None for other kinds."""
    table = presentation_of(kind).counters
    if table is None:
        return None
    return lambda m: table.shows(m.name, m.gpu)


@dataclass
class EccData:
    columns: list[str]
    rows: list[tuple[int, list[Measurement | None]]]
    xids: list[Measurement] = field(default_factory=list)
    xid_total: int = 0


def ecc_result(*, result: CheckResult, xid_limit: int = 200) -> EccData:
    """The kind's declared counters per GPU (only the columns present) and its events, most severe
    first. Empty for a kind that declares no counter table."""
    table = presentation_of(result.kind).counters
    columns = table.columns if table is not None else ()
    events = table.events if table is not None else ()
    cells: dict[int, dict[str, Measurement]] = {}
    for m in Measurement.objects.filter(result=result, name__in=[n for n, _ in columns], gpu__isnull=False):
        if m.gpu is None:  # excluded by the query; narrows the type
            continue
        cells.setdefault(m.gpu, {})[m.name] = m
    present = [(n, label) for n, label in columns if any(n in c for c in cells.values())]
    rows = [(gpu, [cells[gpu].get(n) for n, _ in present]) for gpu in sorted(cells)]
    xid_qs = Measurement.objects.filter(result=result, name__in=events).order_by("id")
    xids = list(xid_qs[:xid_limit])
    return EccData(
        columns=[label for _, label in present],
        rows=rows,
        xids=xids,
        xid_total=len(xids) if len(xids) < xid_limit else xid_qs.count(),
    )
