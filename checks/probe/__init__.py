"""The node-side scripts: `probe.py` is shipped over SSH and run as `python3 - < probe.py`; so is
`rdma_pairs.py`, the perftest pair runner of checks/rdma/bw.py (`python3 - SPEC < rdma_pairs.py`).

Importing this package never runs the probe. Its JSON contract is in SCHEMA.md.
"""

from __future__ import annotations

from pathlib import Path

PROBE_PATH: Path = Path(__file__).resolve().parent / "probe.py"


def probe_source() -> str:
    """The probe script's source, to feed on stdin to `python3 -` on a node."""
    return PROBE_PATH.read_text(encoding="utf-8")


RDMA_PAIRS_PATH: Path = Path(__file__).resolve().parent / "rdma_pairs.py"


def rdma_pairs_source() -> str:
    """The perftest pair runner's source (checks/rdma/bw.py), to feed on stdin to `python3 - SPEC`."""
    return RDMA_PAIRS_PATH.read_text(encoding="utf-8")
