"""A machine busy with other work, for the tests that must hold on one: two busy loops per core (a
laptop compiling or a CI box running other jobs), which starved the demo's simulated readings once."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

# Two per core: the load that made the demo's heat soak lose readings on a 2-core machine.
LOOPS_PER_CORE = 2


@contextlib.contextmanager
def busy_loops(per_core: int = LOOPS_PER_CORE) -> Iterator[int]:
    """Busy-loop processes for the length of the block, killed at its end; yields how many."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(per_core * (os.cpu_count() or 1))
    ]
    try:
        yield len(hogs)
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=30)
