"""Kiln checks: pure Python (no Django, no fabric). Importing the package imports every module in
it, which fills `REGISTRY` with every check kind and `PARSERS` with every parser: a new check is a
new module in its family's subpackage (docs/adding-a-check.md). See checks/core/base.py for the contract."""

from __future__ import annotations

import importlib
import pkgutil

from checks.core.base import REGISTRY, get_check, run_check


def _walk_error(name: str) -> None:
    raise ImportError(f"checks: could not import package {name}")  # never skip a family silently


# Every module of every family subpackage; the node-side scripts (probe/) and the CLI are not checks.
for _module in pkgutil.walk_packages(__path__, f"{__name__}.", onerror=_walk_error):
    if not _module.ispkg and _module.name.split(".")[1] not in ("probe", "__main__"):
        importlib.import_module(_module.name)

__all__ = ["REGISTRY", "get_check", "run_check"]
