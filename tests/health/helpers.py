"""Helpers: finish a run with given per-node verdicts, through run_finalize (the real hook path)."""

from __future__ import annotations

from typing import Any

from portal.runs import services
from portal.runs.models import CheckResult, Run
from tests.portal.helpers import set_result


def finish(run: Run, verdicts: dict[str, tuple[str, str]] | None = None, capture: Any = None) -> Run:
    """Every result passes except `verdicts` {hostname: (status, reason)} on ecc-health; then
    run_finalize closes the run, firing post_save (on-commit callbacks run when `capture` given)."""
    verdicts = verdicts or {}
    CheckResult.objects.filter(run=run).update(status="pass", reason="ok")
    for host, (status, reason) in verdicts.items():
        set_result(run, host, "ecc-health", status, reason)
    if capture is not None:
        with capture(execute=True):
            services.run_finalize(run_id=run.pk)
    else:
        services.run_finalize(run_id=run.pk)
    run.refresh_from_db()
    return run
