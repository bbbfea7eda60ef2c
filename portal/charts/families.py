"""What the result page shows for each chart family a check kind can declare
(checks/core/presentation.py Presentation.chart). A family is a generic renderer: every name it reads
comes from the kind's declaration, so a new check of an existing family needs no portal code."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from portal.charts import figures, selectors
from portal.runs.models import CheckResult

# The result's own figure (figure.json), drawn by the shared template.
FIGURE_SECTION = "charts/_result_figure.html"


@dataclass(frozen=True)
class Family:
    """One family on the result page: `figure` builds the result's own figure (None: the family
    draws per run or elsewhere), `section` the template of its section (context: `result`, `note`,
    `run_link`), `note` the words under the figure, `run_link` a link to the run's chart of the item."""

    section: str = FIGURE_SECTION
    figure: Callable[[CheckResult], dict[str, Any]] | None = None
    note: str = ""
    run_link: bool = False


def _telemetry_figure(result: CheckResult) -> dict[str, Any]:
    data = selectors.burn_in_result(result=result)
    figure = figures.burn_in_figure(data)
    figure["meta"] = {"stored_points": data.stored_points, "drawn_points": data.drawn_points}
    return figure


FAMILIES: dict[str, Family] = {
    "nccl": Family(figure=lambda r: figures.nccl_figure(selectors.nccl_result(result=r)), run_link=True),
    "burn_in": Family(figure=_telemetry_figure, note="Drawn downsampled (LTTB, spikes kept); shaded: throttle events."),
    "dlc": Family(figure=lambda r: figures.dlc_figure(selectors.dlc_result(result=r))),
    "matrix": Family(
        section="charts/family/matrix.html",
        figure=lambda r: figures.matrix_figure(selectors.matrix_result(result=r)),
    ),
    # A table loaded after the page; a run-level chart; a page of its own.
    "ecc": Family(section="charts/family/ecc.html"),
    "filesystem": Family(section="charts/family/filesystem.html"),
    "capacity": Family(section="charts/family/capacity.html"),
}


def family_of(result: CheckResult) -> Family | None:
    """The family that shows `result`, from its kind's declaration; None when it declares none."""
    return FAMILIES.get(selectors.chart_kind(result.kind))
