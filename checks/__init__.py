"""Kiln checks: pure Python (no Django, no fabric). Importing the package imports every module in
it, which fills `REGISTRY` with every check kind and `PARSERS` with every parser: a new check is a
new module here (docs/adding-a-check.md). See checks/base.py for the contract."""

from __future__ import annotations

import importlib
import pkgutil

from checks.base import REGISTRY, get_check, run_check

for _module in pkgutil.iter_modules(__path__):
    if not _module.ispkg and _module.name != "__main__":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["REGISTRY", "get_check", "run_check"]
