"""Soak of the embedded broker (no CELERY_BROKER_URL: the filesystem transport of
worker/fsbroker.py): one real `celery beat` sending the reaper every second, one real worker on the
default threads pool, and four producer processes sending 4,000 tasks between them. Stock kombu's
transport lost messages here and the worker exited on JSONDecodeError; nothing may be lost now,
the worker must live throughout, and every reaper message beat sent must be consumed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from portal.datadir import broker_dirs, init_data_dir
from portal.runs.models import Run
from tests.conftest import REPO, WorkerProcess

pytestmark = pytest.mark.integration

PRODUCERS = 4
# 4 x 500: thousands of messages; about 40 s of sending and delivering on a loaded 2-core machine.
PER_PRODUCER = 500
# Reaper messages beat sends at least (one a second), whether the producers finish sooner or later.
MIN_REAPS = 15
TASKS_MODULE = "tests.portal.broker_soak_tasks"


class EmbeddedWorker(WorkerProcess):
    """The test's worker, on the embedded broker in `data_dir` instead of the tests' Redis."""

    def __init__(self, log_path: Path, data_dir: Path) -> None:
        super().__init__(log_path)
        self.data_dir = data_dir

    def env(self) -> dict[str, str]:
        return embedded_env(super().env(), self.data_dir)

    def argv(self) -> list[str]:
        return [*super().argv(), "-I", TASKS_MODULE]


def embedded_env(env: dict[str, str], data_dir: Path) -> dict[str, str]:
    env["CELERY_BROKER_URL"] = ""  # empty: the settings' embedded default
    env["KILN_DATA_DIR"] = str(data_dir)
    env["KILN_ENV_FILE"] = ""
    return env


def test_it_loses_no_message_and_keeps_the_worker_alive_under_beat_and_producers(
    real_services, transactional_db, cluster, make_run, tmp_path: Path
) -> None:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks

    from portal.runs.finalize import run_finalize
    from portal.runs.models import CheckResult

    data_dir = tmp_path / "data"
    init_data_dir(data_dir)
    queue_dir, _ = broker_dirs(data_dir)
    record = tmp_path / "delivered.txt"

    # kiln.reap (one reaper pass) sent every second, and nothing else on the schedule: every message
    # beat sends is that one. Kiln itself schedules no task for the reaper (it runs in threads).
    PeriodicTask.objects.all().delete()
    every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(name="kiln-reaper", task="kiln.reap", interval=every_second, enabled=True)

    # What the reaper must leave alone: a queued run whose checks wait well within their time in the
    # broker, and a finished run.
    waiting = make_run(cluster)
    done = make_run(cluster)
    CheckResult.objects.filter(run=done).update(status="pass")
    run_finalize(run_id=done.pk, dispatch=False)
    done.refresh_from_db()
    assert waiting.status == "queued" and done.status == "pass"
    before = {r.pk: (r.status, r.finished_at) for r in Run.objects.all()}
    results_before = dict(CheckResult.objects.values_list("pk", "status"))

    worker = EmbeddedWorker(tmp_path / "worker.log", data_dir)
    env = embedded_env(worker.env(), data_dir)
    beat_log = tmp_path / "beat.log"
    beat = None
    producers: list[subprocess.Popen[bytes]] = []
    started = time.monotonic()
    try:
        worker.start()
        assert worker.process is not None
        banner = worker.log_path.read_text()
        assert "worker.fsbroker:Transport" in banner, banner
        with beat_log.open("ab") as log:
            beat = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "worker", "beat", "--loglevel=INFO", "--max-interval=1"],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            producers = [
                subprocess.Popen(
                    [sys.executable, "-m", TASKS_MODULE, str(record), str(n * PER_PRODUCER), str(PER_PRODUCER)],
                    cwd=REPO,
                    env=env,
                    start_new_session=True,
                )
                for n in range(PRODUCERS)
            ]
        for producer in producers:
            assert producer.wait(timeout=120) == 0, "a producer failed"
            assert worker.process.poll() is None, worker.log_path.read_text()[-3000:]
        sent_s = time.monotonic() - started

        total = PRODUCERS * PER_PRODUCER
        deadline = time.monotonic() + 90
        while len(delivered(record)) < total and time.monotonic() < deadline:
            assert worker.process.poll() is None, worker.log_path.read_text()[-3000:]
            time.sleep(0.5)
        drained_s = time.monotonic() - started
        # Beat goes on until it has sent the reaper MIN_REAPS times (a fast machine drains the
        # producers' messages sooner), then stops, and the worker takes what it sent last.
        deadline = time.monotonic() + 60
        while reaps_sent(beat_log) < MIN_REAPS and time.monotonic() < deadline:
            time.sleep(0.5)
        # Beat logs "Sending due task" before it publishes: a SIGTERM between the two would lose a
        # message the test, not the broker, dropped. So the schedule is switched off first, and beat
        # is stopped once it has sent nothing for a few of its 1 s ticks.
        PeriodicTask.objects.filter(name="kiln-reaper").update(enabled=False)
        PeriodicTasks.update_changed()
        settled, last = time.monotonic(), reaps_sent(beat_log)
        deadline = time.monotonic() + 30
        while time.monotonic() - settled < 4 and time.monotonic() < deadline:
            time.sleep(0.5)
            if (now := reaps_sent(beat_log)) != last:
                settled, last = time.monotonic(), now
        os.killpg(beat.pid, 15)
        beat.wait(timeout=20)
        deadline = time.monotonic() + 30
        while any(queue_dir.glob("*.msg")) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # the last reaper task runs (it is delivered, the file is already gone)
        assert worker.process.poll() is None, worker.log_path.read_text()[-3000:]
    finally:
        for producer in producers:
            if producer.poll() is None:
                os.killpg(producer.pid, 9)
                producer.wait()
        if beat is not None and beat.poll() is None:
            os.killpg(beat.pid, 9)
            beat.wait()
        worker.stop()

    worker_log = worker.log_path.read_text()
    ids = delivered(record)
    counts = Counter(ids)
    print(f"soak: {total} tasks sent in {sent_s:.1f}s, all delivered after {drained_s:.1f}s")
    # No loss. Exactly once, too: a message is redelivered only from a worker's unacknowledged
    # messages at its warm shutdown or a lost connection, and this worker neither stopped nor lost one.
    assert set(counts) == set(range(total)), f"lost: {sorted(set(range(total)) - set(counts))[:20]}"
    assert [i for i, n in counts.items() if n > 1] == []
    assert "CRITICAL" not in worker_log and "Unrecoverable" not in worker_log, worker_log[-3000:]
    assert not (queue_dir / ".quarantine").exists()
    assert list(queue_dir.glob("*.msg")) == []

    # Every reaper message beat sent was received and ran.
    beat_text = beat_log.read_text()
    assert "broker -> worker.fsbroker:Transport" in beat_text, beat_text[:2000]  # beat's banner
    sent_reaps = reaps_sent(beat_log)
    received = len(re.findall(r"Task kiln\.reap\[[0-9a-f-]+\] received", worker_log))
    succeeded = len(re.findall(r"Task kiln\.reap\[[0-9a-f-]+\] succeeded", worker_log))
    print(f"soak: beat sent the reaper {sent_reaps} times, the worker ran it {succeeded} times")
    assert sent_reaps >= MIN_REAPS, beat_text[-3000:]
    assert received == sent_reaps and succeeded == sent_reaps, (sent_reaps, received, succeeded)

    # The reaper ran every second against this database and changed nothing: nothing was lost or late.
    assert {r.pk: (r.status, r.finished_at) for r in Run.objects.all()} == before
    assert dict(CheckResult.objects.values_list("pk", "status")) == results_before


def reaps_sent(beat_log: Path) -> int:
    return beat_log.read_text().count("Sending due task kiln-reaper (kiln.reap)")


def delivered(record: Path) -> list[int]:
    try:
        return [int(line) for line in record.read_text().split()]
    except FileNotFoundError:
        return []
