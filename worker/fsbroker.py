"""Kombu's filesystem transport (the embedded, no-server broker) without its lost-message race.

Stock kombu (5.x, an open upstream issue) creates a message's `*.msg` file in the queue folder and
only then writes it, while the reader moves `*.msg` files out without taking the writer's lock: a
reader polling every 0.05 s can take the file while it is still empty. The message is lost and
the worker dies on `JSONDecodeError` ("Unrecoverable error"). This subclass:

- writes a message under a temporary name the reader and the reaper never match (`.NAME.tmp`, not
  ending in `.msg`), fsyncs it, then renames it into place: atomic on POSIX, so a `*.msg` file is
  whole or absent. `_size` and `_purge` match `*.msg` only, and fanout goes through `_put`: both
  see whole messages only.
- claims a message by renaming it into `.claimed/` inside the queue folder (same filesystem, so
  exactly one of several workers wins; stock moves it to the system temp folder, a copy when that
  is another filesystem). A file that still cannot be decoded (written by something else, a disk
  that filled up) is logged and moved to `.quarantine/` instead of stopping the worker.
- creates an exchange's binding table whole (write, then link), where stock creates it empty and
  locks it after, so a publisher reading it at that moment could find nothing to route to.

Selected by the settings' CELERY_BROKER_TRANSPORT for `filesystem://` URLs.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections import deque
from pathlib import Path
from queue import Empty
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads
from kombu.utils.objects import cached_property

logger = logging.getLogger("kiln.broker")

# Subfolders of the queue folder. A leading dot: never `NAME.QUEUE.msg`, so stock readers, `_size`,
# `_purge` and the reaper's `*.msg` scan all pass over them.
CLAIMED = ".claimed"
QUARANTINE = ".quarantine"
TMP_SUFFIX = ".tmp"


def write_atomically(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all: written to `.NAME.tmp` beside it, fsynced, renamed."""
    tmp = path.with_name(f".{path.name}{TMP_SUFFIX}")
    # The same mode as stock's open(..., 'wb'): 0666 less the umask, so the web and the worker can
    # share the folder as they did before.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            # The rename may reach the disk before the data: without this a power cut could leave
            # an empty `.msg`, the very file this module exists to prevent.
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class Channel(filesystem.Channel):
    # kombu's two bases name the argument differently (message, payload): no signature fits both.
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        # Stock's name: the reaper (portal/execution/broker.py) and older readers match `*.QUEUE.msg`.
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        path = Path(self.data_folder_out) / name
        try:
            write_atomically(path, str_to_bytes(dumps(payload)))
        except OSError as exc:
            raise ChannelError(f"Cannot add file {str(path)!r} to directory: {exc}") from exc

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        folder = Path(self.data_folder_in)
        claimed = folder / CLAIMED
        # One listing serves until its names run out: stock lists and sorts the whole folder for
        # every message, O(n) per message with thousands waiting. A message written since is found
        # by the next listing; one another consumer took meanwhile fails its rename below.
        pending = self._listed.setdefault(queue, deque())
        if not pending:
            wanted = f"{queue}.msg"
            pending.extend(sorted(n for n in os.listdir(folder) if n.partition(".")[2] == wanted))
        while pending:
            name = pending.popleft()
            claimed.mkdir(exist_ok=True)
            path = claimed / name
            try:
                os.rename(folder / name, path)
            except FileNotFoundError:
                continue  # another consumer claimed it first
            except OSError as exc:
                raise ChannelError(f"Cannot claim {str(folder / name)!r}: {exc}") from exc
            try:
                payload = loads(bytes_to_str(path.read_bytes()))
            except (OSError, ValueError) as exc:
                self._quarantine(path, exc)
                continue
            if self.store_processed:
                shutil.move(str(path), self.processed_folder)
            else:
                path.unlink(missing_ok=True)
            return payload
        raise Empty()

    @cached_property
    def _listed(self) -> dict[str, deque[str]]:
        """Per queue, the names of the last listing not yet claimed."""
        return {}

    def _quarantine(self, path: Path, exc: BaseException) -> None:
        """Sets an unreadable message aside for a person to look at; the worker goes on."""
        target = path.parent.parent / QUARANTINE / path.name
        try:
            target.parent.mkdir(exist_ok=True)
            os.rename(path, target)
        except OSError:
            target = path  # still claimed: no reader will take it again
        logger.error("broker: unreadable message %s (%s: %s), moved to %s", path.name, type(exc).__name__, exc, target)

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        file = self._exchange_file(exchange)
        if not file.exists():
            self.control_folder.mkdir(exist_ok=True)
            table = [filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")]
            tmp = file.with_name(f".{file.name}.{uuid.uuid4()}{TMP_SUFFIX}")
            try:
                write_atomically(tmp, str_to_bytes(dumps(table)))
                try:
                    os.link(tmp, file)  # fails if another process created it meanwhile: add to that one
                    return
                except FileExistsError:
                    pass
                finally:
                    tmp.unlink(missing_ok=True)
            except OSError as exc:
                raise ChannelError(f"Cannot open {file}") from exc
        super()._queue_bind(exchange, routing_key, pattern, queue)


class Transport(filesystem.Transport):
    Channel = Channel


__all__ = ["Channel", "Transport", "write_atomically"]
