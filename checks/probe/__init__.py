"""The node-side probe: `probe.py` is shipped over SSH and run as `python3 - < probe.py`.

Importing this package never runs the probe. Its JSON contract is in SCHEMA.md.
"""

from __future__ import annotations

from pathlib import Path

PROBE_PATH: Path = Path(__file__).resolve().parent / "probe.py"


def probe_source() -> str:
    """The probe script's source, to feed on stdin to `python3 -` on a node."""
    return PROBE_PATH.read_text(encoding="utf-8")
