"""Worker liveness rows (health.WorkerBeat): written by each worker's beat thread (portal/health/beats.py)."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from portal.health.models import WorkerBeat


def worker_beat_record(*, name: str, now: datetime | None = None) -> None:
    """This worker is alive now. One UPDATE; an INSERT on its first beat."""
    now = now or timezone.now()
    name = name[:200]
    if not WorkerBeat.objects.filter(name=name).update(seen_at=now):
        WorkerBeat.objects.update_or_create(
            name=name, defaults={"seen_at": now}, create_defaults={"started_at": now, "seen_at": now}
        )


def worker_beat_forget(*, name: str) -> None:
    """A worker that stopped cleanly: not "down", just gone."""
    WorkerBeat.objects.filter(name=name[:200]).delete()
