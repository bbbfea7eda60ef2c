"""Process groups: a command's group is learned while it runs, and only a group carrying our tag
is ever stopped (SIGTERM, then SIGKILL after the grace)."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from checks.core.base import Command
from tests.worker.test_ssh import live_members
from worker.procgroup import PgidSniffer, stop_group, tag_for
from worker.ssh import CappedStream, LocalTransport, NodeTarget, remote_shell_line


def local() -> LocalTransport:
    return LocalTransport(NodeTarget(hostname="local", transport="local"))


def start_tagged(argv: tuple[str, ...], tag: str) -> tuple[subprocess.Popen[bytes], int]:
    """Start `argv` the way a node does: the remote shell line, run by a shell (as sshd would)."""
    line = remote_shell_line(Command(argv=argv, timeout=120), tag)
    process = subprocess.Popen(["bash", "-c", line], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    marker = process.stderr.readline() if process.stderr else b""
    assert marker.startswith(b"kiln-pgid "), marker
    return process, int(marker.split()[1])


def test_it_learns_the_group_timeout_makes_and_tags_every_member() -> None:
    process, pgid = start_tagged(("sh", "-c", "sleep 60 & sleep 60"), "41.2")
    try:
        members = live_members(pgid, wait_s=0.5) or []
        deadline = time.monotonic() + 5
        while len(members) < 3 and time.monotonic() < deadline:  # timeout, sh, two sleeps
            time.sleep(0.05)
            members = live_members(pgid, wait_s=0)
        assert os.getpgid(pgid) == pgid and len(members) >= 3
        for pid in members:
            assert b"KILN_TAG=41.2" in open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    finally:
        stop_group(local(), pgid=pgid, tag="41.2", grace_s=1)
        process.wait(10)


def test_it_stops_a_group_on_sigterm_and_says_so() -> None:
    process, pgid = start_tagged(("sh", "-c", "sleep 60 & sleep 60"), "7.1")
    started = time.monotonic()

    outcome = stop_group(local(), pgid=pgid, tag="7.1", grace_s=5)

    assert outcome == "stopped" and time.monotonic() - started < 3
    assert process.wait(10) != 0
    assert live_members(pgid) == []


def test_it_kills_a_group_that_ignores_sigterm_after_the_grace() -> None:
    process, pgid = start_tagged(("sh", "-c", "trap '' TERM; sleep 60 & wait; sleep 60"), "7.1")
    time.sleep(0.3)  # the trap is set
    started = time.monotonic()

    outcome = stop_group(local(), pgid=pgid, tag="7.1", grace_s=1)

    assert outcome == "killed" and 1 <= time.monotonic() - started < 5
    process.wait(10)
    assert live_members(pgid) == []


def test_it_leaves_a_group_without_our_tag_alone() -> None:
    """A process group id recorded for one attempt may belong to anything by the time it is
    stopped (pids are reused): without the attempt's tag, nothing is signalled."""
    process, pgid = start_tagged(("sleep", "60"), "7.1")
    try:
        assert stop_group(local(), pgid=pgid, tag=tag_for(7, 2), grace_s=1) == "gone"
        assert stop_group(local(), pgid=pgid, tag="71.1", grace_s=1) == "gone"
        assert process.poll() is None and live_members(pgid, wait_s=0)
    finally:
        assert stop_group(local(), pgid=pgid, tag="7.1", grace_s=1) == "stopped"
        process.wait(10)
    assert stop_group(local(), pgid=pgid, tag="7.1", grace_s=1) == "gone"


def test_the_local_transport_reports_its_group_and_tags_the_command() -> None:
    seen: list[int] = []
    output = local().run(
        Command(argv=("sh", "-c", 'echo "$$ $KILN_TAG"; echo err >&2'), timeout=10), tag="9.3", on_start=seen.append
    )
    pid, tag = output.stdout.split()
    assert seen == [int(pid)] and tag == "9.3" and output.stderr == "err\n"


def test_a_command_without_a_tag_runs_as_before() -> None:
    line = remote_shell_line(Command(argv=("echo", "hi"), timeout=5))
    assert not line.startswith("sh -c")
    assert subprocess.run(["sh", "-c", line], capture_output=True, text=True).stdout == "hi\n"


@pytest.mark.parametrize("chunks", [[b"kiln-pgid 123\nreal error\n"], [b"kiln-", b"pgid 12", b"3\nreal", b" error\n"]])
def test_it_takes_the_marker_off_stderr_however_it_is_chunked(chunks: list[bytes]) -> None:
    seen: list[int] = []
    sink = CappedStream(1024)
    sniffer = PgidSniffer(sink, seen.append)
    for chunk in chunks:
        sniffer += chunk
    sniffer.flush()
    assert seen == [123] and sink.text() == "real error\n"


def test_it_passes_stderr_through_when_the_shell_printed_no_marker() -> None:
    seen: list[int] = []
    sink = CappedStream(1024)
    sniffer = PgidSniffer(sink, seen.append)
    sniffer += b"sh: 1: exec: tool: not found\n"
    sniffer += b"more\n"
    assert seen == [] and sink.text() == "sh: 1: exec: tool: not found\nmore\n"
    other = CappedStream(1024)
    partial = PgidSniffer(other, seen.append)
    partial += b"kiln-pg"  # cut short: the stream ended
    partial.flush()
    assert seen == [] and other.text() == "kiln-pg"


def test_stopping_races_nothing_when_two_stops_meet() -> None:
    """The task's own stop and the reaper's may meet on one group: both finish, one stops it."""
    process, pgid = start_tagged(("sleep", "60"), "5.5")
    outcomes: list[str] = []
    threads = [
        threading.Thread(target=lambda: outcomes.append(stop_group(local(), pgid=pgid, tag="5.5", grace_s=2)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    process.wait(10)
    assert sorted(outcomes)[-1] == "stopped" and set(outcomes) <= {"stopped", "gone"}
