"""The embedded broker's transport (worker/fsbroker.py) against stock kombu's filesystem transport:
a reader that looks while a message is being written sees nothing with ours, and an empty
message with stock's (the race that lost the reaper's message and stopped the worker)."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from kombu import Connection
from kombu.transport import filesystem

from worker import fsbroker


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, str]:
    for sub in ("queue", "control"):
        (tmp_path / sub).mkdir()
    queue = str(tmp_path / "queue")
    return {"data_folder_in": queue, "data_folder_out": queue, "control_folder": str(tmp_path / "control")}


@pytest.fixture
def channel(folders: dict[str, str]) -> Iterator[Callable[[type], Any]]:
    connections: list[Connection] = []

    def make(transport: type) -> Any:
        conn = Connection("filesystem://localhost/", transport=transport, transport_options=folders)
        connections.append(conn)
        return conn.default_channel

    yield make
    for conn in connections:
        conn.release()


@pytest.fixture
def paused_write(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[], None]], threading.Event]]:
    """Runs a put on a thread that stops once the file exists but before its bytes are written;
    the returned event lets it finish."""
    threads: list[threading.Thread] = []
    release = threading.Event()
    paused = threading.Event()

    def pause(*_: Any) -> None:
        if threading.current_thread() in threads:
            paused.set()
            assert release.wait(10)

    # Stock locks the file it just created, then writes; ours writes, then fsyncs, then renames.
    monkeypatch.setattr(filesystem, "lock", lambda f, flags: pause())
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (pause(), real_fsync(fd)))

    def start(put: Callable[[], None]) -> threading.Event:
        thread = threading.Thread(target=put)
        threads.append(thread)
        thread.start()
        assert paused.wait(10), "the writer never reached the pause"
        return release

    yield start
    release.set()
    for thread in threads:
        thread.join(10)


def test_it_shows_stock_kombu_hands_a_reader_an_empty_message(channel, paused_write, folders) -> None:
    stock = channel(filesystem.Transport)
    release = paused_write(lambda: stock._put("default", {"task": "kiln.reap"}))

    assert stock._size("default") == 1  # the empty file is already in the queue
    with pytest.raises(json.JSONDecodeError):
        stock._get("default")  # what stopped the worker: the message is gone, the error unrecoverable
    release.set()


def test_it_shows_a_reader_nothing_until_the_message_is_whole(channel, paused_write, folders) -> None:
    ours = channel(fsbroker.Transport)
    release = paused_write(lambda: ours._put("default", {"task": "kiln.reap"}))

    assert [n for n in os.listdir(folders["data_folder_in"]) if n.endswith(".msg")] == []
    assert ours._size("default") == 0
    assert ours._purge("default") == 0  # a purge cannot remove it half-written either
    with pytest.raises(Empty):
        ours._get("default")
    release.set()
    for _ in range(100):
        if ours._size("default"):
            break
        threading.Event().wait(0.05)
    assert ours._get("default") == {"task": "kiln.reap"}
    assert os.listdir(folders["data_folder_in"]) == [fsbroker.CLAIMED]  # nothing left behind
    assert os.listdir(Path(folders["data_folder_in"]) / fsbroker.CLAIMED) == []


def test_it_sets_an_unreadable_message_aside_and_delivers_the_next(channel, folders, caplog) -> None:
    ours = channel(fsbroker.Transport)
    queue = Path(folders["data_folder_in"])
    (queue / "0_bad.default.msg").write_bytes(b"")  # "0_" sorts before any real name: what a stock writer could leave
    ours._put("default", {"n": 2})

    with caplog.at_level(logging.ERROR, logger="kiln.broker"):
        assert ours._get("default") == {"n": 2}
    assert (queue / fsbroker.QUARANTINE / "0_bad.default.msg").exists()
    assert "unreadable message 0_bad.default.msg (JSONDecodeError" in caplog.text
    with pytest.raises(Empty):
        ours._get("default")


def test_it_delivers_each_message_once_in_order_and_only_to_its_queue(channel, folders) -> None:
    writer, reader = channel(fsbroker.Transport), channel(fsbroker.Transport)
    for n in range(3):
        writer._put("default", {"n": n})
        threading.Event().wait(0.002)  # names order by the millisecond
    writer._put("site-b", {"n": "b"})

    assert [reader._get("default")["n"] for _ in range(3)] == [0, 1, 2]
    with pytest.raises(Empty):
        reader._get("default")
    assert reader._size("site-b") == 1
    assert reader._get("site-b") == {"n": "b"}


def test_it_routes_fanout_through_the_same_write(channel, folders) -> None:
    ours = channel(fsbroker.Transport)
    ours._queue_bind("bcast", "", "", "node-a")
    ours._queue_bind("bcast", "", "", "node-b")  # the table exists: added to it under its lock
    assert sorted(q.queue for q in ours.get_table("bcast")) == ["node-a", "node-b"]

    ours._put_fanout("bcast", {"ping": 1}, "")
    assert ours._get("node-a") == {"ping": 1}
    assert ours._get("node-b") == {"ping": 1}
    control = os.listdir(folders["control_folder"])
    assert control == ["bcast.exchange"]  # no temporary file left beside the table


def test_it_leaves_nothing_in_the_queue_when_the_write_fails(channel, folders, monkeypatch) -> None:
    ours = channel(fsbroker.Transport)

    def full(fd: int, data: Any) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(Exception, match="No space left on device"):
        ours._put("default", {"n": 1})
    monkeypatch.undo()
    assert os.listdir(folders["data_folder_in"]) == []
