"""The reaper's own threads: one in every Celery worker process and one in celery beat, each
running a pass (portal/execution/reaper.py reaper_pass) every KILN_REAPER_INTERVAL_S.

A thread of the worker's main process, not a task: no check can occupy it, so a worker whose every
slot holds an hours-long burn-in still reaps its dead sibling's runs, and nothing queues up behind
them. Beat's thread reaps when no worker is left at all. A lock spanning the processes (in the
broker) lets one pass run at a time; each thread stops orphans only on the queues its process
reaches (a worker: the queues it consumes; beat: the default queue, whose SSH keys it has,
docker-compose.yml).
The worker's ready and shutdown signals and beat's init start and stop them (connected in
ExecutionConfig.ready(): worker/ imports no app).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from django.db import DatabaseError

from portal.execution.reaper import reaper_interval_s, reaper_pass

logger = logging.getLogger(__name__)


class ReaperLoop:
    """One per process: a pass at start, then one every interval, until stopped."""

    def __init__(self, queues: Iterable[str], *, interval_s: float | None = None) -> None:
        self.queues = sorted(set(queues))
        self.interval_s = float(interval_s if interval_s is not None else reaper_interval_s())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kiln-reaper", daemon=True)

    def start(self) -> None:
        logger.info(
            "Kiln reaper thread: a pass every %ss; stops orphaned processes on queue(s) %s",
            int(self.interval_s),
            ", ".join(self.queues),
        )
        self._thread.start()

    def pass_once(self) -> list[int]:
        """One pass; any failure (the database away, a bug) is logged and the next pass tries again."""
        from worker.db import release_connection

        try:
            touched = reaper_pass(queues=self.queues)
            if touched:
                logger.info("reaper: touched run(s) %s", touched)
            return touched
        except DatabaseError as exc:
            # The database away or not migrated yet: one line each pass, not a traceback burying
            # the worker's log (its last lines are what `make up` shows when a worker dies).
            logger.error("reaper pass failed: %s: %s; trying again in %ss", type(exc).__name__, exc, self.interval_s)
            return []
        except Exception:
            logger.exception("reaper pass failed; trying again in %ss", self.interval_s)
            return []
        finally:
            release_connection()  # hold no connection between passes

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.pass_once()
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)


# This process's reaper threads (a worker with an embedded beat, `-B`, has two: the lock serializes them).
_loops: list[ReaperLoop] = []


def _start(queues: Iterable[str]) -> None:
    loop = ReaperLoop(queues)
    _loops.append(loop)
    loop.start()


def worker_queues(consumer: Any) -> list[str]:
    """The queues a worker consumes (its -Q; none: the default queue)."""
    from portal.runs.queues import default_queue

    app = getattr(consumer, "app", None)
    consumed = getattr(getattr(getattr(app, "amqp", None), "queues", None), "consume_from", None)
    return sorted(consumed) if consumed else [default_queue()]


def worker_ready(sender: Any = None, **_: Any) -> None:
    _start(worker_queues(sender))


def beat_init(sender: Any = None, **_: Any) -> None:
    from portal.runs.queues import default_queue

    _start([default_queue()])


def worker_shutdown(**_: Any) -> None:
    while _loops:
        _loops.pop().stop()
