"""Series points stored packed (portal/runs/packing.py): exact, small, digested as before, with a
downsampled view that charts read."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

import pytest

from checks.core.base import Series as CheckSeries
from checks.core.base import Verdict
from portal.runs import packing, services
from portal.runs.models import VIEW_POINTS, Series, points_digest, points_view
from tests.portal.test_raw_output import claimed


def same(a: list[Any], b: list[Any]) -> bool:
    """Equal with types and signs: what points_digest sees."""
    return json.dumps(a) == json.dumps(b)


@pytest.mark.parametrize(
    "values",
    [
        [],
        [None, None],
        [0, 1, 2, 1 << 30, -(1 << 40)],  # NCCL message sizes stay ints
        [35.0, 36.0, None, 70.0],  # temperatures as floats, a gap kept
        [0.0, 1.006, 2.013, 43_199.874],  # sample times rounded to the millisecond
        [690.125, 0.001, 1e6, 12.5],  # milliwatts
        [0.1 + 0.2, 1 / 3, 1e-300, 1e300],  # no decimal scale: float64
        [1, 1.0, True, -0.0, 2**70, "x", None],  # anything else: JSON, still exact
        [float("nan"), float("inf")],
    ],
)
def test_it_packs_exactly_with_types(values: list[Any]) -> None:
    back = packing.unpack(packing.pack(values))
    assert same(back, values)


def test_a_burn_in_curve_packs_small_and_fast_enough() -> None:
    rng = random.Random(7)
    times = [round(k * 1.006 + rng.uniform(0, 0.004), 3) for k in range(43_200)]
    power = [rng.randint(640_000, 700_000) / 1000 for _ in times]
    temps = [float(66 + (k // 600) % 3) for k in range(len(times))]
    sizes = {name: len(packing.pack(v)) for name, v in (("t", times), ("power", power), ("temp", temps))}
    # jsonb held ~8-10 bytes a point; packed: a few bits (temperatures) to ~3 bytes (noisy power).
    assert sizes["t"] < 43_200 and sizes["power"] < 3 * 43_200 and sizes["temp"] < 2_000, sizes
    assert packing.unpack(packing.pack(power)) == power


def test_it_refuses_an_unknown_version() -> None:
    blob = bytearray(packing.pack([1.5]))
    blob[0] = 9
    with pytest.raises(ValueError, match="version 9"):
        packing.unpack(bytes(blob))


def test_the_model_reads_and_writes_lists_and_digests_the_same_points(db, cluster, make_run) -> None:
    result = claimed(cluster, make_run)[0]
    row = Series(result=result, name="busbw", x=[1 << 20, 1 << 30], y=[20.5, None])
    row.save()
    row = Series.objects.get(pk=row.pk)
    assert (row.x, row.y, row.count, str(row)) == ([1 << 20, 1 << 30], [20.5, None], 2, "busbw (2 points)")
    assert row.points_sha256 == points_digest([1 << 20, 1 << 30], [20.5, None])
    assert bytes(row.view_packed) == b""  # no longer than a chart draws: no view


def test_a_recorded_burn_in_stores_packed_points_a_view_and_the_old_digest(db, cluster, make_run) -> None:
    result = claimed(cluster, make_run)[0]
    n = 10_000
    times = [round(k * 1.005, 3) for k in range(n)]
    curves = [
        CheckSeries(
            name="temp_gpu", unit="C", x=times, y=[None if k == 5_000 else 60.0 + k % 3 for k in range(n)], gpu=g
        )
        for g in range(4)
    ]
    curves[2].y[7_000] = 95.0  # a one-sample spike

    assert services.result_record(
        result=result, claim="t", verdict=Verdict("pass", "ok"), measurements=[], series=curves
    )

    rows = list(Series.objects.filter(result=result).order_by("gpu"))
    assert [r.count for r in rows] == [n] * 4
    for row, curve in zip(rows, curves, strict=True):
        assert (row.x, row.y) == (curve.x, curve.y)
        # The digest of the logical points, as jsonb-era rows had it (certificates cite it).
        text = json.dumps([list(curve.x), list(curve.y)], separators=(",", ":"))
        assert row.points_sha256 == hashlib.sha256(text.encode()).hexdigest()
        view_x, view_y = row.view()
        assert len(view_x) <= VIEW_POINTS and view_x[0] == 0.0 and view_x[-1] == times[-1]
        assert None in view_y  # the unreadable sample stays a gap
    assert 95.0 in rows[2].view()[1]
    stored = sum(len(bytes(r.x_packed)) + len(bytes(r.y_packed)) + len(bytes(r.view_packed)) for r in rows)
    as_json = sum(len(json.dumps(c.x)) + len(json.dumps(c.y)) for c in curves)
    assert stored < as_json / 10, (stored, as_json)


def test_a_series_lttb_cannot_draw_is_stored_without_a_view() -> None:
    x = ["a"] * (VIEW_POINTS + 1)
    assert points_view(x, [1.0] * len(x)) == b""
    assert points_view([0.0] * 2, [1.0]) == b""
