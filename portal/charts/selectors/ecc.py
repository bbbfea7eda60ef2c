"""ECC counters per GPU and Xid events of one result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from portal.charts.selectors.common import chart_kind
from portal.runs.models import CheckResult, Measurement

ECC_COLUMNS = (
    ("ecc_volatile_uncorrected", "volatile uncorr."),
    ("ecc_volatile_corrected", "volatile corr."),
    ("ecc_aggregate_uncorrected", "aggregate uncorr."),
    ("ecc_aggregate_corrected", "aggregate corr."),
    ("remapped_rows_uncorrectable", "remapped rows uncorr."),
    ("remapped_rows_correctable", "remapped rows corr."),
    ("remap_pending", "remap pending"),
    ("remap_failure", "remap failure"),
    ("retired_pages_single_bit", "retired pages SBE"),
    ("retired_pages_double_bit", "retired pages DBE"),
    ("retired_pages_pending", "retired pending"),
)


_COUNTERS = frozenset(name for name, _ in ECC_COLUMNS)
# Kernel log events: GPU Xids and NVSwitch SXids (checks/xid.py), shown in one table.
XID_NAMES = ("xid", "sxid")


def in_ecc_table(kind: str) -> Callable[[Measurement], bool] | None:
    """For a result of the ECC chart family: which of its measurements the ECC table shows (the
    per-GPU counters and every Xid event), so the result page's own measurement table leaves them
    out instead of showing them twice. None for the other families."""
    if chart_kind(kind) != "ecc":
        return None
    return lambda m: m.name in XID_NAMES or (m.name in _COUNTERS and m.gpu is not None)


@dataclass
class EccData:
    columns: list[str]
    rows: list[tuple[int, list[Measurement | None]]]
    xids: list[Measurement] = field(default_factory=list)
    xid_total: int = 0


def ecc_result(*, result: CheckResult, xid_limit: int = 200) -> EccData:
    """Counters per GPU (only the columns present) and the Xid events, most severe first."""
    names = [name for name, _ in ECC_COLUMNS]
    cells: dict[int, dict[str, Measurement]] = {}
    for m in Measurement.objects.filter(result=result, name__in=names, gpu__isnull=False):
        if m.gpu is None:  # excluded by the query; narrows the type
            continue
        cells.setdefault(m.gpu, {})[m.name] = m
    present = [(n, label) for n, label in ECC_COLUMNS if any(n in c for c in cells.values())]
    rows = [(gpu, [cells[gpu].get(n) for n, _ in present]) for gpu in sorted(cells)]
    xid_qs = Measurement.objects.filter(result=result, name__in=XID_NAMES).order_by("id")
    xids = list(xid_qs[:xid_limit])
    return EccData(
        columns=[label for _, label in present],
        rows=rows,
        xids=xids,
        xid_total=len(xids) if len(xids) < xid_limit else xid_qs.count(),
    )
