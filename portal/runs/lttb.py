"""Largest-Triangle-Three-Buckets downsampling (Steinarsson 2013, "Downsampling Time Series for
Visual Representation", ch. 4). Pure Python, no Django.

LTTB keeps the first and last points and, in each of n-2 equal buckets between them, the point
that forms the largest triangle with the point kept before it and the average of the next bucket.
Unlike averaging or striding it keeps spikes: a one-sample temperature peak or clock drop stays
visible after 86,400 points become 1,500.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

Number = float | int


def lttb(x: Sequence[Number], y: Sequence[Number], n: int) -> tuple[list[Number], list[Number]]:
    """At most `n` of the points (x[i], y[i]), first and last always kept. x must be sorted; every
    value a number (see `downsample` for series with gaps)."""
    size = len(x)
    if size != len(y):
        raise ValueError(f"x and y differ in length ({size} != {len(y)})")
    if n >= size or size <= 2:
        return list(x), list(y)
    if n < 3:
        # Fewer than three points cannot carry a bucket: keep the ends (n == 1: the first).
        return ([x[0], x[-1]], [y[0], y[-1]]) if n == 2 else ([x[0]], [y[0]])
    out_x: list[Number] = [x[0]]
    out_y: list[Number] = [y[0]]
    every = (size - 2) / (n - 2)
    a = 0  # index of the point kept last
    for i in range(n - 2):
        start = int(i * every) + 1
        end = int((i + 1) * every) + 1
        # The next bucket's average (the last bucket looks at the final point).
        next_start = end
        next_end = min(int((i + 2) * every) + 1, size)
        if next_start >= next_end:
            avg_x, avg_y = x[-1], y[-1]
        else:
            count = next_end - next_start
            avg_x = sum(x[next_start:next_end]) / count
            avg_y = sum(y[next_start:next_end]) / count
        ax, ay = x[a], y[a]
        # Twice the triangle's area; the constant factor does not change which point wins.
        dx, dy = avg_x - ax, avg_y - ay
        best, best_area = start, -1.0
        for j in range(start, end):
            area = abs(dx * (y[j] - ay) - (x[j] - ax) * dy)
            if area > best_area:
                best, best_area = j, area
        out_x.append(x[best])
        out_y.append(y[best])
        a = best
    out_x.append(x[-1])
    out_y.append(y[-1])
    return out_x, out_y


def downsample(
    x: Sequence[Number], y: Sequence[Number | None], n: int
) -> tuple[list[Number | None], list[Number | None]]:
    """LTTB for a series with unreadable samples (y None). A gap is kept as a gap (one None point),
    never bridged: a null reading is unknown, not a value. The budget `n` is shared between the
    readable stretches by length, gap markers included: at most `n` points in all."""
    size = len(x)
    if size != len(y):
        raise ValueError(f"x and y differ in length ({size} != {len(y)})")
    if size <= n:
        return list(x), list(y)
    segments: list[tuple[int, int]] = []
    start: int | None = None
    for i, value in enumerate(y):
        if value is None:
            if start is not None:
                segments.append((start, i))
                start = None
        elif start is None:
            start = i
    if start is not None:
        segments.append((start, size))
    if len(segments) == 1 and segments[0] == (0, size):
        # One stretch over the whole series: no None in y.
        whole_x, whole_y = lttb(x, cast("Sequence[Number]", y), n)
        return [*whole_x], [*whole_y]
    readable = sum(end - begin for begin, end in segments)
    if not readable:
        return [x[0]], [None]
    if 3 * len(segments) > n:
        # More gaps than the budget can draw: the series is mostly unknown. Drop the unreadable
        # samples so the point count stays bounded (hover still shows only real readings).
        kept = [i for i in range(size) if y[i] is not None]
        kept_x, kept_y = lttb([x[i] for i in kept], [v for v in y if v is not None], n)
        return [*kept_x], [*kept_y]
    out_x: list[Number | None] = []
    out_y: list[Number | None] = []
    # Reserve one point per gap marker and one per stretch (a share is at least one point).
    budget = n - 2 * len(segments)
    for number, (begin, end) in enumerate(segments):
        share = max(1, budget * (end - begin) // readable)
        seg_x, seg_y = lttb(x[begin:end], y[begin:end], share)  # type: ignore[arg-type]
        if number:
            # The gap: a point with no value, at the first unreadable sample's x.
            out_x.append(x[segments[number - 1][1]])
            out_y.append(None)
        out_x += seg_x
        out_y += seg_y
    return out_x, out_y
