"""Kiln checks: pure Python (no Django, no fabric). Importing the package imports every module in
it, which fills `REGISTRY` with every check kind and `PARSERS` with every parser: a new check is a
new module here (docs/adding-a-check.md). See checks/base.py for the contract."""

from __future__ import annotations

import importlib
import pkgutil

from checks.base import REGISTRY, get_check, run_check
from checks.presentation import NOTHING, Presentation


# The declarations of the registered kinds: here, beside the registry they read, so that
# checks/presentation.py (which checks/base.py imports) never imports the package back.
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


for _module in pkgutil.iter_modules(__path__):
    if not _module.ispkg and _module.name != "__main__":
        importlib.import_module(f"{__name__}.{_module.name}")


__all__ = ["REGISTRY", "get_check", "kinds_charted", "presentation_of", "presented", "run_check"]
