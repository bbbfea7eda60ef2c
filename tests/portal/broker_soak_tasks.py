"""The soak test's trivial task and producer (tests/portal/test_broker_soak.py).

The worker imports this module (`celery worker -I`); a producer is `python -m` this module with
the record file, the first id and a count: it sends `count` tasks, each recording its id."""

from __future__ import annotations

import os
import sys

from celery import shared_task

from worker.celery import app


@shared_task(name="kiln_test.soak_record")
def soak_record(path: str, message_id: int) -> None:
    """One line per delivery: O_APPEND makes each short write land whole at the end."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{message_id}\n".encode())
    finally:
        os.close(fd)


def produce(path: str, first: int, count: int) -> None:
    for message_id in range(first, first + count):
        app.send_task("kiln_test.soak_record", args=(path, message_id))


if __name__ == "__main__":
    produce(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
