"""Kiln checks: pure Python (no Django, no fabric). Importing the package imports every module in
it, which fills `REGISTRY` with every check kind and `PARSERS` with every parser: a new check is a
new module in its family's subpackage (docs/adding-a-check.md). See checks/core/base.py for the contract."""

from __future__ import annotations

import importlib
import pkgutil

from checks.core.base import REGISTRY, get_check, run_check
from checks.core.presentation import NOTHING, Presentation


# The declarations of the registered kinds: here, beside the registry they read, so that
# checks/core/presentation.py (which checks/core/base.py imports) never imports the package back.
def presentation_of(kind: str) -> Presentation:
    """The declaration of a check kind; an unknown kind (a result of a check since removed) shows
    nothing rather than breaking a page."""
    cls = REGISTRY.get(kind)
    return getattr(cls, "presentation", NOTHING) if cls is not None else NOTHING


def presented() -> list[tuple[str, Presentation]]:
    """(kind, presentation) of every registered kind, by rank then kind."""
    pairs = [(kind, getattr(cls, "presentation", NOTHING)) for kind, cls in REGISTRY.items()]
    return sorted(pairs, key=lambda kp: (kp[1].rank, kp[0]))


def kinds_charted(family: str) -> tuple[str, ...]:
    """The kinds whose results are drawn by chart family `family`."""
    return tuple(kind for kind, p in presented() if p.chart == family)


def _walk_error(name: str) -> None:
    raise ImportError(f"checks: could not import package {name}")  # never skip a family silently


# Every module of every family subpackage; the node-side scripts (probe/) and the CLI are not checks.
for _module in pkgutil.walk_packages(__path__, f"{__name__}.", onerror=_walk_error):
    if not _module.ispkg and _module.name.split(".")[1] not in ("probe", "__main__"):
        importlib.import_module(_module.name)


__all__ = ["REGISTRY", "get_check", "kinds_charted", "presentation_of", "presented", "run_check"]
