"""Kiln checks: pure Python (no Django, no fabric). Importing the package fills
`REGISTRY` with every check kind; see checks/base.py for the contract."""

from __future__ import annotations

from checks import ecc, inventory, nvidia_smi  # noqa: F401  (import registers the checks and parsers)
from checks.base import REGISTRY, get_check, run_check

__all__ = ["REGISTRY", "get_check", "run_check"]
