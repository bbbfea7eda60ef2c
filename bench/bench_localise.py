"""Rounds of localisation by halves (checks/core/localise.py) against the ring of pairs it replaced.

    python bench/bench_localise.py [--parallelism 8] [--sizes 32,64,1250,12500]

For each group size and a few placements of slow nodes (1, 2 and 4, spread over the group), the
search is run against a model of the cluster (a run is slow when it holds a slow node) and prints:
rounds of parallel sub-runs after the group run, sub-runs, node-runs (sum of nodes over sub-runs),
and the planner's own time. The peer, measured in the same run, is the ring of pairs the portal
used before: every node with its successor, disjoint pairs `--parallelism` at a time, then one
verification round per suspect batch (its rounds are counted, not run; `ratio` = halves / ring).
The 16-node search is printed first as the small peer of the planner time.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checks.core.localise import Bisection, conclude, simulate


def ring_rounds(n: int, parallelism: int, slow: int) -> int:
    """Rounds of the ring of pairs (the old portal/runs/pairs.py, its batching copied here): every
    node with its successor, disjoint pairs at most `parallelism` at a time, then one verification
    pair per suspect in batches of `parallelism`."""
    nodes = list(range(n))
    pairs = [(0, 1), (1, 2), (0, 2)] if n == 3 else [(nodes[i], nodes[(i + 1) % n]) for i in range(n)]
    rounds = 0
    while pairs:
        busy: set[int] = set()
        later = []
        taken = 0
        for a, b in pairs:
            if taken < parallelism and a not in busy and b not in busy:
                busy.update((a, b))
                taken += 1
            else:
                later.append((a, b))
        pairs, rounds = later, rounds + 1
    return rounds + math.ceil(slow / parallelism)


def spread(nodes: Sequence[str], count: int) -> set[str]:
    step = len(nodes) / count
    return {nodes[math.floor(i * step + step / 2)] for i in range(count)}


def search(nodes: list[str], slow: set[str], parallelism: int) -> tuple[Bisection, float]:
    started = time.perf_counter()
    state = simulate(nodes, lambda ran: bool(slow.intersection(ran)), capacity=parallelism)
    elapsed = time.perf_counter() - started
    named = {h for h, v in conclude(state).node_verdicts.items() if v.status != "pass"}
    if named != slow:
        raise SystemExit(f"{len(nodes)} nodes: named {sorted(named)}, slow {sorted(slow)}")
    return state, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parallelism", type=int, default=8)
    parser.add_argument("--sizes", default="32,64,1250,12500")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    peer_nodes = [f"n{i:05d}" for i in range(16)]
    _, peer_s = search(peer_nodes, spread(peer_nodes, 1), args.parallelism)
    print(f"peer: 16 nodes, 1 slow: planner {peer_s * 1000:.2f} ms")
    columns = (("nodes", 6), ("slow", 4), ("rounds", 6), ("ring", 5), ("ratio", 6), ("sub-runs", 8), ("node-runs", 9))
    print(" ".join(f"{name:>{width}}" for name, width in columns), f"{'planner':>10}")
    for n in sizes:
        nodes = [f"n{i:05d}" for i in range(n)]
        for count in (1, 2, 4):
            state, elapsed = search(nodes, spread(nodes, count), args.parallelism)
            ring = ring_rounds(n, args.parallelism, count)
            node_runs = sum(len(r.nodes) for r in state.runs)
            print(
                f"{n:>6} {count:>4} {state.rounds:>6} {ring:>5} {state.rounds / ring:>6.3f} {len(state.runs):>8} "
                f"{node_runs:>9} {elapsed * 1000:>7.1f} ms (x{elapsed / peer_s:.0f})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
