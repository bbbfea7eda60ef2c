"""A machine busy with other work, for the tests that must hold on one: two runnable processes per
core (a laptop compiling or a CI box running other jobs), which starved the demo's simulated
readings once.

The busy loops top the machine up to that load rather than add to it: each spins only while fewer
than the target are runnable besides itself (/proc/loadavg's running count), and sleeps a moment
otherwise. Alone they are the whole load; beside the other processes of a parallel test run they
add only what is missing, so they never starve those processes for nothing."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

# Two per core: the load that made the demo's heat soak lose readings on a 2-core machine.
LOOPS_PER_CORE = 2

# Each loop: spin for a slice, then read the runnable count; while the machine already runs the
# target without it, sleep a slice instead. 0.1 s slices: the load holds without the reads costing.
_HOG = """
import time
target = {target}
def others_running():
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0]) - 1
    except (OSError, ValueError, IndexError):
        return 0
while True:
    if others_running() >= target:
        time.sleep(0.1)
        continue
    end = time.monotonic() + 0.1
    while time.monotonic() < end:
        pass
"""


@contextlib.contextmanager
def busy_loops(per_core: int = LOOPS_PER_CORE) -> Iterator[int]:
    """Busy-loop processes for the length of the block, killed at its end; yields how many. Together
    with whatever else runs they keep `per_core` runnable processes per core."""
    count = per_core * (os.cpu_count() or 1)
    code = _HOG.format(target=count)
    hogs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL) for _ in range(count)]
    try:
        yield len(hogs)
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=30)
