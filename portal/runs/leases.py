"""Leases: a running task proves it is alive, and learns when its work was closed under it.

A task that claims results holds them here (`held`). One keeper thread per worker process:
- renews the lease of every result its tasks hold, in one UPDATE every KILN_HEARTBEAT_S
  (heartbeat_at, lease_expires_at = now + KILN_LEASE_TTL_S): the reaper acts on an expired lease;
- reads back which of them are no longer `running` (cancelled, or closed by the reaper) and stops
  their node-side process groups over the task's own open connection;
- writes what a check is doing on its node (command_started_at before its first command,
  remote_pgid while a command runs) in short database phases of its own (worker/db.py), so a task
  waiting on SSH holds no connection, and neither does the keeper between beats.

The task's transport is wrapped (`Holding.track`): every command it runs carries its result's tag
and reports its process group (worker/procgroup.py); the execution code itself is unchanged.
"""

from __future__ import annotations

import functools
import inspect
import logging
import operator
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError
from django.db.models import Case, IntegerField, Q, Value, When
from django.db.models.functions import Cast
from django.utils import timezone

from checks.core.base import Command, CommandOutput
from portal.runs import events
from portal.runs.dbretry import db_retry
from portal.runs.models import CheckResult, Status
from worker.db import db_phase, timed
from worker.procgroup import stop_group, tag_for
from worker.transport import REMOTE_KILL_GRACE_S, SessionRefusedError, Transport, TransportError

logger = logging.getLogger(__name__)

# How long a task waits for "command started" to be written before it runs the command anyway
# (the database is away): the check still runs, only a worker death in that window would be
# retried instead of reported.
WRITE_WAIT_S = 10.0
# Claims of one result before a lost worker's check is no longer handed out again (re-queued by
# the reaper, taken over by a redelivered message): a check that kills its worker (an OOM in the
# worker, a poison message) must not take down worker after worker. The reaper then reports it.
MAX_CLAIMS = 3
# Tries of one keeper write across database errors (one per beat: ~15 s at the 3 s default)
# before it is dropped and logged; a refused write (integrity) is dropped at once.
WRITE_TRIES = 5


def heartbeat_s() -> float:
    return float(getattr(settings, "KILN_HEARTBEAT_S", 3))


def lease_ttl_s() -> float:
    return float(getattr(settings, "KILN_LEASE_TTL_S", 30))


def lease_expiry(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) + timedelta(seconds=lease_ttl_s())


def lost_message_s() -> float:
    return float(getattr(settings, "KILN_LOST_MESSAGE_S", 60))


def queued_lease(now: datetime | None = None) -> datetime:
    """When a queued result's message may be presumed lost if nothing has claimed it yet."""
    return (now or timezone.now()) + timedelta(seconds=lost_message_s())


def worker_name() -> str:
    """This worker as the run's log names it: the Celery node name (or host) and the process."""
    hostname = None
    try:
        from celery import current_task

        if current_task is not None:
            hostname = current_task.request.hostname
    except Exception:  # outside a task (kiln_run --inline): the host name will do
        hostname = None
    return f"{hostname or socket.gethostname()} pid {os.getpid()}"[:200]


def holders_gone(names: Iterable[str]) -> list[str]:
    """Of these holders (worker_name values), the processes of this very worker (same Celery node
    name: a prefork pool's children) that no longer exist. Their leases need not be waited out: a
    pool child killed mid-task, its message redelivered to a sibling, is taken over at once. Any
    other holder (another worker, another host) is judged by its lease alone."""
    mine, _, my_pid = worker_name().rpartition(" pid ")
    gone = []
    for name in set(names):
        node, _, pid = name.rpartition(" pid ")
        if node != mine or not pid.isdigit() or pid == my_pid:
            continue
        if not _pid_alive(int(pid)):
            gone.append(name)
    return gone


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped by the pool) is gone
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] not in "ZX"
    except (OSError, ValueError):
        return True


def claim_fields(now: datetime) -> dict[str, Any]:
    """What a claim writes besides status/claimed_by: who holds it, and its first lease."""
    return {
        "worker_name": worker_name(),
        "heartbeat_at": now,
        "lease_expires_at": lease_expiry(now),
        "command_started_at": None,
    }


class CheckStopped(Exception):
    """The result was closed under the task (cancelled, reaped): stop working on it."""


class Holding:
    """The results one task holds, the node's transport, and what runs on the node for them."""

    def __init__(self, keeper: LeaseKeeper, *, claim: str, results: list[CheckResult], label: str) -> None:
        self.keeper = keeper
        self.claim = claim
        self.label = label
        self.results = {r.pk: r for r in results}
        self.pending: set[int] = set(self.results)  # claimed and not yet finished by this task
        self.closed: dict[int, str] = {}  # result id -> the status someone else gave it
        self.current: CheckResult | None = None
        self.inner: Transport | None = None
        self._live: dict[int, set[int]] = {}  # result id -> process groups running for it now
        self._started: set[int] = set()
        self._stops: list[Any] = []
        self._lock = threading.Lock()

    # --- the execution thread -----------------------------------------------------------------

    def track(self, transport: Transport) -> TrackedTransport:
        self.inner = transport
        return TrackedTransport(transport, self)

    def begin(self, result: CheckResult) -> None:
        """The task moves on to `result` (the previous one is done, recorded or not)."""
        with self._lock:
            if self.current is not None and self.current.pk != result.pk:
                self.pending.discard(self.current.pk)
            self.current = result

    def is_stopped(self, result_id: int) -> bool:
        return result_id in self.closed

    def command_starting(self, result: CheckResult) -> None:
        """Before a command of `result` starts on the node: durable, so a dead worker's check is
        known to have touched the node (the reaper then reports it instead of re-running it)."""
        if result.pk in self._started:
            return
        self._started.add(result.pk)
        with timed("mark_started"):
            self.keeper.mark_started(result.pk)

    def started_marked(self, result: CheckResult) -> None:
        """`result`'s command start is already written (with the previous check's record)."""
        self._started.add(result.pk)

    def command_running(self, result: CheckResult, pgid: int) -> None:
        with self._lock:
            self._live.setdefault(result.pk, set()).add(pgid)
            closed = result.pk in self.closed
        self.keeper.pgid_running(result.pk, pgid)
        if closed:
            self._stop(result.pk, {pgid})

    def command_ended(self, result: CheckResult, pgid: int) -> None:
        with self._lock:
            self._live.get(result.pk, set()).discard(pgid)
        self.keeper.pgid_ended(result.pk, pgid)

    def wait_stops(self, timeout: float = REMOTE_KILL_GRACE_S + 15) -> None:
        """Let stops in flight finish before the connection they use is closed."""
        with self._lock:
            stops = list(self._stops)
        for future in stops:
            try:
                future.result(timeout=timeout)
            except Exception:
                logger.exception("%s: stopping node-side processes failed", self.label)

    # --- the keeper thread --------------------------------------------------------------------

    def saw_closed(self, statuses: dict[int, str]) -> None:
        """The heartbeat found these held results no longer `running`: stop what runs for them."""
        for result_id, status in statuses.items():
            with self._lock:
                if result_id in self.closed:
                    continue
                self.closed[result_id] = status
                live = set(self._live.get(result_id, ()))
            if live:
                self._stop(result_id, live)

    def _stop(self, result_id: int, pgids: set[int]) -> None:
        with self._lock:
            for pgid in pgids:
                self._stops.append(self.keeper.stopper.submit(self._stop_one, result_id, pgid))

    def _stop_one(self, result_id: int, pgid: int) -> None:
        result = self.results[result_id]
        tag = tag_for(result.pk, result.attempt)
        why = self.closed.get(result_id, "closed")
        started = time.monotonic()
        inner = self.inner
        if inner is None:
            return
        try:
            outcome = _stop_over(inner, pgid=pgid, tag=tag)
        except Exception as exc:  # the reaper retries over a new connection once the lease lapses
            message = (
                f"could not stop {result.item_key} on {self.label} (process group {pgid}) over the open "
                f"connection: {exc}; the reaper will try over a new one"
            )
            self.keeper.submit(
                lambda: events.run_event_add(run_id=result.run_id, kind=events.STOP_FAILED, message=message)
            )
            return
        took = time.monotonic() - started
        how = {"stopped": "ended on SIGTERM", "killed": "needed SIGKILL", "gone": "had already ended"}.get(
            outcome, "was still there after SIGKILL"
        )
        message = f"{result.item_key} on {self.label} ({why}): process group {pgid} {how} ({took:.1f} s)"

        def write() -> None:
            if outcome != "survived":
                CheckResult.objects.filter(pk=result.pk, remote_pgid=pgid).update(remote_pgid=None)
            kind = events.PROCESSES_STOPPED if outcome != "survived" else events.STOP_FAILED
            events.run_event_add(run_id=result.run_id, kind=kind, message=message)

        self.keeper.submit(write)


def _stop_over(transport: Transport, *, pgid: int, tag: str) -> str:
    """Stop a group over the task's open connection; over a new one to the same node when the
    open one has no session to spare (sshd's MaxSessions, e.g. 1: the check's command holds it)."""
    try:
        return stop_group(transport, pgid=pgid, tag=tag, grace_s=REMOTE_KILL_GRACE_S)
    except SessionRefusedError:
        target = getattr(transport, "target", None)
        if target is None:
            raise
        from worker.ssh import open_transport  # the worker's: not loaded by commands that import this module

        fresh = open_transport(target)
        try:
            return stop_group(fresh, pgid=pgid, tag=tag, grace_s=REMOTE_KILL_GRACE_S)
        finally:
            fresh.close()


class TrackedTransport:
    """The task's transport, run through its Holding: commands carry their result's tag, their
    process group is recorded while they run, and a result closed under the task stops it."""

    def __init__(self, inner: Transport, holding: Holding) -> None:
        self.inner = inner
        self.holding = holding
        accepts: Mapping[str, inspect.Parameter]
        try:
            accepts = inspect.signature(inner.run).parameters
        except (TypeError, ValueError):
            accepts = {}
        # A transport that cannot tag its commands (a stand-in in tests, a wrapper) still runs them;
        # only their process groups go unrecorded, so a cancel cannot stop them before they end.
        self.tags = "on_start" in accepts or any(p.kind is p.VAR_KEYWORD for p in accepts.values())
        if not self.tags:
            logger.warning("%s: %s cannot report process groups", holding.label, type(inner).__name__)

    def run(self, command: Command, **_: Any) -> CommandOutput:
        holding = self.holding
        result = holding.current
        if result is None:
            return self.inner.run(command)
        if holding.is_stopped(result.pk):
            raise CheckStopped(f"result {result.pk} is {holding.closed[result.pk]}")
        holding.command_starting(result)
        pgids: list[int] = []

        def on_start(pgid: int) -> None:
            pgids.append(pgid)
            holding.command_running(result, pgid)

        # A TransportError leaves remote_pgid set: the command's fate is unknown, so the reaper
        # stops it over a new connection once this task's lease has lapsed.
        if self.tags:
            output = self.inner.run(command, tag=tag_for(result.pk, result.attempt), on_start=on_start)
        else:
            output = self.inner.run(command)
        for pgid in pgids:
            holding.command_ended(result, pgid)
        if holding.is_stopped(result.pk):
            raise CheckStopped(f"result {result.pk} is {holding.closed[result.pk]}")
        return output

    def close(self) -> None:
        self.holding.wait_stops()
        self.inner.close()


class LeaseKeeper:
    """The heartbeat of one worker process (see the module docstring)."""

    def __init__(self) -> None:
        self._holdings: dict[int, Holding] = {}
        self._writes: deque[tuple[Callable[[], Any], threading.Event | None]] = deque()
        self._head_failures = 0
        # "Command started" marks, written together: the checks of many nodes start at once.
        self._started: list[tuple[int, threading.Event]] = []
        # Process groups to write (result -> what to write), coalesced: ("set", pgid or None), or
        # ("clear", pgid) to clear only while it is still that group. A node runs ~10 commands, each
        # a group started then ended: one UPDATE per event was thousands a tick at 256 nodes.
        self._pgids: dict[int, tuple[str, int | None]] = {}
        # What the database holds as each held result's process group, as far as this keeper knows
        # (from the claim, then its own writes; only the keeper writes a group, others only clear
        # one). A group that started and ended between two writes, on a result whose stored group
        # is already none, needs no write at all: most of a quick plan's commands end that fast.
        self._pgid_stored: dict[int, int | None] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_beat = 0.0
        self.stopper = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kiln-stop")

    def hold(self, *, claim: str, results: list[CheckResult], label: str) -> Holding:
        holding = Holding(self, claim=claim, results=results, label=label)
        with self._lock:
            self._holdings[id(holding)] = holding
            self._pgid_stored.update((r.pk, r.remote_pgid) for r in results)
        self._ensure_thread()
        return holding

    def release(self, holding: Holding) -> None:
        holding.wait_stops()
        with self._lock:
            self._holdings.pop(id(holding), None)
        self.flush()
        with self._lock:
            for pk in holding.results:
                self._pgid_stored.pop(pk, None)

    def submit(self, write: Callable[[], Any], *, wait: bool = False) -> bool:
        """Queue a database write for the keeper's connection; with `wait`, until it is done."""
        done = threading.Event() if wait else None
        with self._lock:
            self._writes.append((write, done))
        self._ensure_thread()
        self._wake.set()
        if done is None:
            return True
        if not done.wait(WRITE_WAIT_S):
            logger.warning("lease keeper: a write waited over %ss (database away?); going on", WRITE_WAIT_S)
            return False
        return True

    def pgid_running(self, result_id: int, pgid: int) -> None:
        """`result_id`'s command runs as process group `pgid` (written at the next write)."""
        with self._lock:
            self._pgids[result_id] = ("set", pgid)
        self._ensure_thread()
        self._wake.set()

    def pgid_ended(self, result_id: int, pgid: int) -> None:
        """Group `pgid` of `result_id` ended: the result runs no group, unless a newer one is
        recorded by then. Its start not yet written, the two writes are one: no group, and none
        at all when the database already holds no group for the result."""
        with self._lock:
            pending = self._pgids.get(result_id)
            if pending == ("set", pgid) and result_id in self._pgid_stored and self._pgid_stored[result_id] is None:
                del self._pgids[result_id]
                return
            self._pgids[result_id] = ("set", None) if pending == ("set", pgid) else ("clear", pgid)
        self._ensure_thread()
        self._wake.set()

    def _flush_pgids(self) -> None:
        """The coalesced process-group writes, in two statements at most."""
        with self._lock:
            pgids, self._pgids = self._pgids, {}
        if not pgids:
            return
        sets = {pk: value for pk, (kind, value) in pgids.items() if kind == "set"}
        clears = [(pk, value) for pk, (kind, value) in pgids.items() if kind == "clear"]
        try:
            if sets:
                CheckResult.objects.filter(pk__in=sets).update(
                    # Cast: a CASE whose every branch is NULL (groups started and ended between
                    # two writes) is text to PostgreSQL, and the column is an integer.
                    remote_pgid=Cast(
                        Case(*(When(pk=pk, then=Value(value)) for pk, value in sets.items())), IntegerField()
                    )
                )
            if clears:
                CheckResult.objects.filter(
                    functools.reduce(operator.or_, (Q(pk=pk, remote_pgid=value) for pk, value in clears))
                ).update(remote_pgid=None)
        except DatabaseError:
            with self._lock:
                for pk, write in pgids.items():
                    self._pgids.setdefault(pk, write)  # again at the next beat; a newer event wins
            raise
        with self._lock:
            for pk, value in [*sets.items(), *((pk, None) for pk, _ in clears)]:
                if pk in self._pgid_stored:  # still held
                    self._pgid_stored[pk] = value

    def mark_started(self, result_id: int) -> bool:
        """Write command_started_at (once) before a command of `result_id` starts; waits for it."""
        done = threading.Event()
        with self._lock:
            self._started.append((result_id, done))
        self._ensure_thread()
        self._wake.set()
        if not done.wait(WRITE_WAIT_S):
            logger.warning("lease keeper: 'command started' waited over %ss (database away?); going on", WRITE_WAIT_S)
            return False
        return True

    def flush(self, timeout: float = WRITE_WAIT_S) -> bool:
        return self.submit(lambda: None, wait=True) if self._thread is not None else True

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="kiln-lease-keeper", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            self._wake.wait(timeout=max(0.0, self._next_beat - time.monotonic()))
            self._wake.clear()
            self.tick()

    def tick(self) -> None:
        """Write what is queued; renew and read back the leases when a beat is due. In a database
        phase of its own (worker/db.py): the connection goes back to the worker's pool after each
        tick instead of being kept by this thread. Nothing held and nothing to write: no phase,
        so an idle worker opens no connection at each beat."""
        with self._lock:
            idle = (
                not self._started
                and not self._writes
                and not self._pgids
                and not any(h.pending for h in self._holdings.values())
            )
        if idle:
            self._next_beat = time.monotonic() + heartbeat_s()
            return
        try:
            with db_phase("heartbeat"):
                self._flush_writes()
                self._beat_if_due()
        except Exception:
            logger.exception("lease keeper: database write failed; retrying at the next beat")
            self._next_beat = time.monotonic() + heartbeat_s()

    def _beat_if_due(self) -> None:
        if time.monotonic() >= self._next_beat:
            self.beat()
            self._next_beat = time.monotonic() + heartbeat_s()

    def _flush_writes(self) -> None:
        """The "command started" marks first, then the queued writes in order, the marks that
        arrive meanwhile between two writes: a task waits on its mark before its command starts,
        while nobody waits on a process-group write (with 256 nodes a tick holds thousands). A beat
        that falls due meanwhile is not kept waiting either: behind a long queue on a loaded
        database the leases lapsed, and the reaper closed live tasks' checks as "worker lost"."""
        while True:
            self._flush_started()
            self._beat_if_due()
            self._flush_pgids()  # before any write queued after them (a stop's note clears a group too)
            with self._lock:
                if not self._writes:
                    return
                write, done = self._writes[0]
            try:
                write()
            except IntegrityError:
                logger.exception("lease keeper: a write was refused; dropped")
            except DatabaseError:
                self._head_failures += 1
                if self._head_failures < WRITE_TRIES:
                    raise  # stays queued for the next beat, on a new connection
                logger.exception("lease keeper: a write failed %d times; dropped", WRITE_TRIES)
            self._head_failures = 0
            with self._lock:
                self._writes.popleft()
            if done is not None:
                done.set()

    def _flush_started(self) -> None:
        with self._lock:
            started, self._started = self._started, []
        if started:
            try:
                CheckResult.objects.filter(pk__in=[pk for pk, _ in started], command_started_at__isnull=True).update(
                    command_started_at=timezone.now()
                )
            except DatabaseError:
                with self._lock:
                    self._started[:0] = started  # again at the next beat; the waiters go on after WRITE_WAIT_S
                raise
            for _, event in started:
                event.set()

    def beat(self) -> None:
        with self._lock:
            holdings = list(self._holdings.values())
        ids = sorted({pk for h in holdings for pk in h.pending})
        if not ids:
            return
        now = timezone.now()
        CheckResult.objects.filter(pk__in=ids, status=Status.RUNNING).update(
            heartbeat_at=now, lease_expires_at=lease_expiry(now)
        )
        closed = dict(CheckResult.objects.filter(pk__in=ids).exclude(status=Status.RUNNING).values_list("pk", "status"))
        for holding in holdings:
            mine = {pk: status for pk, status in closed.items() if pk in holding.pending}
            if mine:
                holding.saw_closed(mine)


KEEPER = LeaseKeeper()


@contextmanager
def held(*, claim: str, results: list[CheckResult], label: str) -> Iterator[Holding]:
    """Hold `results` (just claimed by `claim`) while the block runs: heartbeat, cancel, stop."""
    holding = KEEPER.hold(claim=claim, results=results, label=label)
    try:
        yield holding
    finally:
        with timed("release"):
            KEEPER.release(holding)


def stop_taken_over(*, transport: Transport, results: list[CheckResult], label: str) -> None:
    """Before re-running results taken over from a lapsed lease: stop what their last attempt may
    still run on the node (the previous holder is gone, its processes need not be)."""
    for result in results:
        pgid = result.remote_pgid
        if pgid is None:
            continue
        tag = tag_for(result.pk, result.attempt - 1)
        try:
            outcome = stop_group(transport, pgid=pgid, tag=tag, grace_s=REMOTE_KILL_GRACE_S)
        except (TransportError, RuntimeError) as exc:
            logger.warning("%s: could not stop the previous attempt of result %s: %s", label, result.pk, exc)
            continue
        message = (
            f"{result.item_key} on {label}: the previous attempt's process group {pgid} {outcome} "
            "before the check ran again"
            if outcome != "gone"
            else ""
        )
        with db_phase("record"):
            db_retry(
                functools.partial(_note_stopped, result=result, pgid=pgid, message=message),
                what=f"noting the stop of result {result.pk}'s previous attempt",
            )


def _note_stopped(_attempt: int, *, result: CheckResult, pgid: int, message: str) -> None:
    CheckResult.objects.filter(pk=result.pk, remote_pgid=pgid).update(remote_pgid=None)
    if message:
        events.run_event_add(run_id=result.run_id, kind=events.PROCESSES_STOPPED, message=message)
