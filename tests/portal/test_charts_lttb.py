"""LTTB downsampling: bounded, keeps the ends and the spikes, keeps gaps as gaps."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import overload

import pytest

from portal.runs.lttb import downsample, lttb


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


class CountingSequence(Sequence[float]):
    """A list that counts the elements read from it (a slice counts each element it returns)."""

    def __init__(self, values: list[float]) -> None:
        self.values = values
        self.reads = 0

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> list[float]: ...
    def __getitem__(self, index: int | slice) -> float | list[float]:
        got = self.values[index]
        self.reads += len(got) if isinstance(index, slice) else 1
        return got


def test_it_reads_each_point_a_bounded_number_of_times() -> None:
    """24 h at 1 Hz down to 1,500 points: linear work (each point is read once in its bucket's scan
    and once in the next-bucket average), so a day of 8 GPUs x 4 metrics is no page's wait. A
    quadratic rewrite would read billions of elements here; counted, not timed."""
    raw_x, raw_y = wave(86_400)
    x, y = CountingSequence(raw_x), CountingSequence(raw_y)

    out_x, out_y = lttb(x, y, 1500)

    assert (out_x, out_y) == lttb(raw_x, raw_y, 1500)
    for seq in (x, y):
        assert seq.reads <= 2 * len(seq) + 3 * 1500, seq.reads
