"""Writes of the history pages: a finished run's key values, folded per subject, so comparing runs
reads a few rows per node (RunKeyValue) instead of every key measurement of both runs."""

from __future__ import annotations

from django.db import transaction

from portal.history.selectors.compare import key_result_info, key_values_measured
from portal.runs.models import ACTIVE_STATUSES, Run, RunKeyValue


def run_key_values_store(*, run_id: int) -> int:
    """Fold and store the key values of a finished run, replacing what was stored. Idempotent; a run
    still going stores nothing (its values change). Returns the rows stored."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None or run.status in ACTIVE_STATUSES:
        return 0
    info = key_result_info(run)
    rows = [
        RunKeyValue(run=run, subject=subject, metric=metric, item_key=item_key, value=value, gpu=gpu, result_id=rid)
        for (subject, metric, item_key), (value, gpu, rid) in key_values_measured(run, info).items()
    ]
    with transaction.atomic():
        RunKeyValue.objects.filter(run=run).delete()
        # One INSERT on PostgreSQL whatever the run's size: its rows travel as one array per column
        # (about 100k rows at 12,500 nodes, a few MB); SQLite's own parameter limit batches them.
        RunKeyValue.objects.bulk_create(rows)
    return len(rows)
