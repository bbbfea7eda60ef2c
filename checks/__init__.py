"""Kiln checks: pure Python (no Django, no fabric). Importing the package fills
`REGISTRY` with every check kind; see checks/base.py for the contract."""

from __future__ import annotations

from checks import (  # noqa: F401  (importing registers the checks and parsers)
    burnin,
    dcgm,
    ecc,
    filesystem,
    infiniband,
    inventory,
    io_benchmarks,
    links,
    nccl,
    nvidia_smi,
    software,
    thermal,
    xid,
)
from checks.base import REGISTRY, get_check, run_check

__all__ = ["REGISTRY", "get_check", "run_check"]
