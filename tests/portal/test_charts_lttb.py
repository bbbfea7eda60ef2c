"""LTTB downsampling: bounded, keeps the ends and the spikes, keeps gaps as gaps."""

from __future__ import annotations

import math
import random
import time

import pytest

from portal.charts.lttb import downsample, lttb


def wave(n: int) -> tuple[list[float], list[float]]:
    rng = random.Random(7)
    x = [float(i) for i in range(n)]
    return x, [60 + 5 * math.sin(i / 500) + rng.random() for i in range(n)]


@pytest.mark.parametrize("n", [3, 10, 500, 1500])
def test_it_returns_at_most_n_points_with_the_first_and_last_kept(n: int) -> None:
    x, y = wave(10_000)

    out_x, out_y = lttb(x, y, n)

    assert len(out_x) == len(out_y) == n
    assert (out_x[0], out_y[0]) == (x[0], y[0])
    assert (out_x[-1], out_y[-1]) == (x[-1], y[-1])
    assert out_x == sorted(out_x)
    assert all(y[int(px)] == py for px, py in zip(out_x, out_y, strict=True))  # real points only


def test_it_keeps_a_one_sample_spike_and_a_one_sample_drop() -> None:
    x, y = wave(86_400)
    y[40_000] = 99.0  # a one-second temperature spike
    y[70_001] = 10.0  # and a one-second drop

    out_x, out_y = lttb(x, y, 1500)

    assert 99.0 in out_y and 40_000.0 in out_x
    assert 10.0 in out_y and 70_001.0 in out_x


def test_it_returns_short_series_unchanged() -> None:
    assert lttb([0, 1, 2], [5, 6, 7], 10) == ([0, 1, 2], [5, 6, 7])
    assert lttb([0, 1, 2, 3], [5, 6, 7, 8], 2) == ([0, 3], [5, 8])


def test_it_refuses_mismatched_lengths() -> None:
    with pytest.raises(ValueError):
        lttb([0, 1], [1], 5)


def test_it_keeps_unreadable_samples_as_gaps_within_the_budget() -> None:
    x, y = wave(20_000)
    y[5_000:5_010] = [None] * 10
    y[15_000] = None

    out_x, out_y = downsample(x, y, 1000)

    assert len(out_x) <= 1000
    assert out_y.count(None) == 2  # one marker per gap, never bridged
    gap = out_y.index(None)
    assert out_x[gap] == 5_000.0
    assert (out_x[0], out_x[-1]) == (0.0, 19_999.0)


def test_it_stays_bounded_when_gaps_outnumber_the_budget() -> None:
    x = [float(i) for i in range(10_000)]
    y = [None if i % 2 else float(i) for i in range(10_000)]

    out_x, out_y = downsample(x, y, 100)

    assert len(out_x) <= 100
    assert None not in out_y


def test_it_downsamples_a_day_at_one_hertz_quickly() -> None:
    """24 h at 1 Hz, 8 GPUs x 4 metrics: the downsampling itself is not what a page waits on."""
    x, y = wave(86_400)
    start = time.perf_counter()
    for _ in range(32):
        lttb(x, y, 1500)
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, f"32 x LTTB(86,400 -> 1,500) took {elapsed:.2f} s"
