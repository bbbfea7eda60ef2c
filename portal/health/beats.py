"""Worker liveness for /metrics: a thread in each Celery worker writes its WorkerBeat row every
KILN_WORKER_BEAT_S, idle or busy, and the row is deleted when the worker stops cleanly. A result's
lease heartbeat (portal/runs/leases.py) only beats while a worker holds work, so an idle worker
would look dead by it; this one beats always. The worker's ready and shutdown signals start and stop it
(connected in HealthConfig.ready(): worker/ imports no app)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.conf import settings
from django.db import DatabaseError

from portal.health.services import worker_beat_forget, worker_beat_record

logger = logging.getLogger(__name__)


def beat_s() -> float:
    return float(settings.KILN_WORKER_BEAT_S)


class Beater:
    """One per worker process: beats until stopped, then forgets the worker (a clean stop is not "down")."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kiln-worker-beat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def beat_once(self) -> bool:
        """One beat; a database that is away is logged and tried again next beat. True if written."""
        from worker.db import release_connection

        try:
            worker_beat_record(name=self.name)
            return True
        except DatabaseError as exc:
            logger.warning("worker beat of %s not written: %s", self.name, exc)
            return False
        finally:
            release_connection()  # hold no connection between beats

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.beat_once()
            self._stop.wait(beat_s())

    def stop(self) -> None:
        from worker.db import release_connection

        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        try:
            worker_beat_forget(name=self.name)
        except DatabaseError as exc:  # its row ages out of the alert's window instead
            logger.warning("worker beat of %s not removed: %s", self.name, exc)
        finally:
            release_connection()


# This worker process's beater, started once the worker is ready.
_beater: Beater | None = None


def worker_ready(sender: Any = None, **_: Any) -> None:
    global _beater
    _beater = Beater(str(getattr(sender, "hostname", "") or "celery@unknown"))
    _beater.start()


def worker_shutdown(**_: Any) -> None:
    global _beater
    if _beater is not None:
        _beater.stop()
        _beater = None
