"""How many certificate verifications run at once: a few for the whole site, fewer per user.

A verification holds a web thread and a child process of up to KILN_VERIFY_MEMORY_MB for up to
KILN_VERIFY_WALL_S; unbounded, eight viewers uploading at once held every thread and made every other
page wait. A slot is a lock that its holder's death frees: a PostgreSQL session advisory lock on the
request's own connection (every web process and host shares the database; a killed process's
connection closes and its locks go with it), or, on SQLite (one host), flock(2) on a file in the data
folder (closed, so freed, when the process dies). Whoever finds no free slot is told to come back
(Busy): the pages and the API answer 429 with Retry-After, at once, instead of queueing.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

# The advisory-lock key space of these slots (a 64-bit key: this tag in the high 32 bits). The tag is
# "KvSl" in ASCII, so that it is unlikely to meet another application's keys in a shared database.
_TAG = 0x4B76536C
_GLOBAL = 0  # user id 0: no Django user has it (ids start at 1)
PUBLIC = -1  # the public verify page's visitors, together
# The public verify page's slots (no user), in a key space of their own: "KvPu".
_PUBLIC_TAG = 0x4B765075
# Slots per user in the key space: KILN_VERIFY_PER_USER must stay below it.
_PER_USER_MAX = 64


class Busy(Exception):
    """Every slot of `scope` ("user" or "site") is taken."""

    def __init__(self, scope: str, retry_after: int) -> None:
        self.scope = scope
        self.retry_after = retry_after
        what = {
            "user": "your earlier verifications are still running",
            "public": "the site is verifying as many certificates for visitors at once as it allows",
        }.get(scope, "the site is verifying as many certificates at once as it allows")
        self.what = what
        super().__init__(f"{what}; try again in {retry_after} s")


def _key(user_id: int, slot: int) -> int:
    if user_id < 0:  # the public page's slots
        return (_PUBLIC_TAG << 32) | slot
    return (_TAG << 32) | (user_id * _PER_USER_MAX + slot)


@contextmanager
def _advisory(user_id: int, slot: int) -> Iterator[bool]:
    key = _key(user_id, slot)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        taken = bool(cursor.fetchone()[0])
    try:
        yield taken
    finally:
        if taken:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])


@contextmanager
def _flock(user_id: int, slot: int) -> Iterator[bool]:
    folder = Path(settings.DATA_DIR) / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    name = f"verify-public-{slot}" if user_id < 0 else f"verify-{user_id}-{slot}"
    fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield True
    finally:
        os.close(fd)  # frees the lock, as the process's death would


def _take(stack: ExitStack, user_id: int, count: int) -> bool:
    """One of `count` slots of `user_id` (0: the site's, PUBLIC: the public page's) held on `stack`, or False."""
    lock: Any = _advisory if connection.vendor == "postgresql" else _flock
    for slot in range(count):
        held = ExitStack()
        if held.enter_context(lock(user_id, slot)):
            stack.push(held)
            return True
        held.close()
    return False


@contextmanager
def verification_slot(user_id: int) -> Iterator[None]:
    """Hold one of the user's and one of the site's slots while the body runs; Busy if either is full."""
    retry = int(settings.KILN_VERIFY_RETRY_AFTER_S)
    per_user = min(int(settings.KILN_VERIFY_PER_USER), _PER_USER_MAX)
    with ExitStack() as stack:
        if not _take(stack, user_id, per_user):
            raise Busy("user", retry)
        if not _take(stack, _GLOBAL, int(settings.KILN_VERIFY_CONCURRENCY)):
            raise Busy("site", retry)
        yield


@contextmanager
def public_slot() -> Iterator[None]:
    """Hold one of the public page's slots (KILN_VERIFY_PUBLIC_CONCURRENCY, for every visitor
    together) and one of the site's while the body runs; Busy if either is full. The public ones are
    taken first: visitors never hold more of the site's slots than their own number."""
    retry = int(settings.KILN_VERIFY_RETRY_AFTER_S)
    with ExitStack() as stack:
        if not _take(stack, PUBLIC, int(settings.KILN_VERIFY_PUBLIC_CONCURRENCY)):
            raise Busy("public", retry)
        if not _take(stack, _GLOBAL, int(settings.KILN_VERIFY_CONCURRENCY)):
            raise Busy("site", retry)
        yield
