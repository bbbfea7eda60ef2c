"""What the broker still holds for Kiln's run tasks, so the reaper can tell a lost message from a
long queue.

A node's task may legitimately wait in the broker behind a busy worker for as long as the queue
takes; a lost one (Redis flushed or restarted without persistence) is gone from it. With Redis,
Kombu keeps waiting messages in the queue's list (one per priority step) and messages delivered
to a worker but not yet acknowledged in the `unacked` hash, indexed by delivery time in
`unacked_index` (Kiln acks late: a running task's message stays there until it ends). A message
delivered long ago whose results are still `queued` went to a consumer that died before claiming
them, so only deliveries younger than the allowance count as pending.

The scan reads the list once (LRANGE; ~1 KB per message: 10,000 waiting nodes are ~10 MB) and
only runs when some result is overdue, over the default queue and the overdue runs' own queues.
Kombu's filesystem transport (the embedded default) keeps each waiting message of every queue as
a file in one folder and deletes it on delivery: the files are the pending messages. Other
brokers cannot be inspected here: the answer is None, and the reaper re-enqueues on time alone (a
duplicate delivery is harmless: the claim takes nothing a live lease holds).
"""

from __future__ import annotations

import ast
import base64
import json
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from portal.runs.dispatch import RUN_GROUP, RUN_NODE

logger = logging.getLogger(__name__)

TaskKey = tuple[str, tuple[Any, ...]]
RUN_TASKS = (RUN_NODE, RUN_GROUP)


def pending_tasks(*, max_age_s: float, queues: Iterable[str] = ()) -> set[TaskKey] | None:
    """(task name, args) of the run tasks waiting in the broker (in the default queue and in
    `queues`: the clusters' own, portal/runs/queues.py), or delivered to a worker less than
    `max_age_s` ago and not acknowledged. None when the broker cannot be inspected."""
    from worker.celery import app

    url = str(app.conf.broker_url or "")
    if url.startswith("filesystem://"):
        folder = (app.conf.broker_transport_options or {}).get("data_folder_in")
        return pending_in_folder(Path(folder)) if folder else None
    if not url.startswith(("redis://", "rediss://", "sentinel://")):
        return None
    try:
        with app.connection_for_read() as conn:
            channel: Any = conn.default_channel
            client = channel.client
            wanted = {app.conf.task_default_queue or "celery", *queues}
            names = sorted({channel._q_for_pri(queue, step) for queue in wanted for step in channel.priority_steps})
            found: set[TaskKey] = set()
            for name in names:
                for raw in client.lrange(name, 0, -1):
                    _add(found, raw)
            recent = client.zrangebyscore(channel.unacked_index_key, time.time() - max_age_s, "+inf")
            if recent:
                for raw in client.hmget(channel.unacked_key, recent):
                    if raw:
                        payload = json.loads(raw)
                        _add(found, payload[0] if isinstance(payload, list) and payload else payload)
            return found
    except Exception:  # the broker is away: the reaper goes on time alone this round
        logger.warning("reaper: could not read the broker's queue", exc_info=True)
        return None


def pending_in_folder(folder: Path) -> set[TaskKey] | None:
    """The run tasks waiting in a Kombu filesystem queue folder (one `*.msg` file per message)."""
    found: set[TaskKey] = set()
    try:
        files = list(folder.glob("*.msg"))
    except OSError:
        logger.warning("reaper: could not list the broker folder %s", folder, exc_info=True)
        return None
    for path in files:
        try:
            _add(found, path.read_bytes())
        except OSError:
            continue  # delivered (deleted) while we looked: not pending
    return found


def _add(found: set[TaskKey], raw: Any) -> None:
    key = task_key(raw)
    if key is not None:
        found.add(key)


def task_key(raw: Any) -> TaskKey | None:
    """(task name, args) of one Celery (protocol 2) message as Kombu stores it, or None."""
    try:
        message = json.loads(raw) if isinstance(raw, (bytes, str)) else raw
        headers = message.get("headers") or {}
        name = headers.get("task")
        if name not in RUN_TASKS:
            return None
        body = message.get("body")
        if (message.get("properties") or {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        try:
            args = json.loads(body)[0]
        except (TypeError, ValueError, IndexError, KeyError):
            args = ast.literal_eval(headers.get("argsrepr") or "()")
        return name, tuple(args)
    except (TypeError, ValueError, AttributeError, SyntaxError):
        return None
