"""Writes of a run's log (RunEvent): what the system did to a run, when, and why.

The run page shows these lines (selectors.run_events). Kinds are short words; the message is a
sentence a person reads."""

from __future__ import annotations

from portal.runs.models import RunEvent

REENQUEUED = "re-enqueued"
WORKER_LOST = "worker lost"
CANCELLED = "cancelled"
PROCESSES_STOPPED = "processes stopped"
STOP_FAILED = "stop failed"
NO_WORKER = "no worker"


def run_event_add(*, run_id: int, kind: str, message: str) -> RunEvent:
    return RunEvent.objects.create(run_id=run_id, kind=kind[:40], message=message[:4000])
