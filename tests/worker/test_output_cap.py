"""The transport caps what it reads from a command while reading: head and tail kept, the cut
marked in the text and on CommandOutput.truncated; memory stays bounded however much a tool prints.
Local transport in-process; SSH through the sshd testbed (root)."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from checks.core.base import Command
from worker.ssh import DEFAULT_OUTPUT_CAP, CappedStream, LocalTransport, NodeTarget, SSHTransport

# Prints START, n bytes of 'x', then END, on the stream named by argv[1], in 64 KiB writes.
FLOOD = (
    "import sys\n"
    "out = getattr(sys, sys.argv[1]).buffer\n"
    "n = int(sys.argv[2])\n"
    "out.write(b'START')\n"
    "while n > 0:\n"
    "    k = min(n, 65536); out.write(b'x' * k); n -= k\n"
    "out.write(b'END\\n')\n"
)


def flood(stream: str, size: int) -> Command:
    return Command(argv=("python3", "-c", FLOOD, stream, str(size)), timeout=60)


def local(cap: int) -> LocalTransport:
    return LocalTransport(NodeTarget(hostname="localhost", transport="local", output_cap=cap))


def expected(total: int, cap: int) -> tuple[str, str]:
    """The head and tail a CappedStream of `cap` keeps of START + 'x' * n + END\\n (total bytes)."""
    data = b"START" + b"x" * (total - 9) + b"END\n"
    head_size = cap - cap // 4
    return data[:head_size].decode(), data[total - cap // 4 :].decode()


def test_it_keeps_everything_under_the_cap_and_says_nothing_was_cut() -> None:
    stream = CappedStream(100)
    for chunk in (b"ab", b"c" * 50, b"d" * 48):
        stream.feed(chunk)
    assert (stream.text(), stream.cut) == ("ab" + "c" * 50 + "d" * 48, 0)


def test_it_keeps_the_same_head_and_tail_whatever_the_chunking() -> None:
    rng = random.Random(9)
    data = bytes(rng.randrange(32, 127) for _ in range(20_000))
    for _ in range(20):
        stream, pos = CappedStream(1000), 0
        while pos < len(data):
            size = rng.randrange(1, 3000)
            stream.feed(data[pos : pos + size])
            pos += size
        head, marker, tail = stream.text().partition("\n[... 19000 bytes cut by Kiln")
        assert marker, stream.text()[:900]
        assert head == data[:750].decode()
        assert tail.endswith("head and tail kept ...]\n" + data[-250:].decode())
        assert stream.cut == 19000


def test_it_cuts_a_runaway_local_command_while_reading_with_bounded_memory() -> None:
    cap, size = 256 * 1024, 64 * 1024 * 1024
    tracemalloc.start()
    try:
        output = local(cap).run(flood("stdout", size))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert output.exit_code == 0 and output.truncated and not output.timed_out
    head, tail = expected(size + 9, cap)
    cut = size + 9 - cap
    assert (
        output.stdout
        == f"{head}\n[... {cut} bytes cut by Kiln: output over the {cap}-byte read cap; head and tail kept ...]\n{tail}"
    )
    assert output.stdout.startswith("START") and output.stdout.endswith("END\n")
    assert peak < 16 * cap, f"peak {peak} bytes for a {size}-byte output"


def test_it_caps_stderr_on_its_own_and_marks_the_output_truncated() -> None:
    output = local(4096).run(flood("stderr", 100_000))
    assert output.truncated and output.stdout == ""
    assert output.stderr.startswith("START") and output.stderr.endswith("END\n")
    assert "bytes cut by Kiln" in output.stderr


def test_it_leaves_an_output_under_the_cap_untouched() -> None:
    output = local(DEFAULT_OUTPUT_CAP).run(flood("stdout", 100_000))
    assert not output.truncated
    assert output.stdout == "START" + "x" * 100_000 + "END\n"


def test_it_keeps_carriage_returns_and_replaces_undecodable_bytes_like_ssh() -> None:
    command = Command(argv=("printf", "a\\rb\\377c\\n"), timeout=10)
    output = local(DEFAULT_OUTPUT_CAP).run(command)
    assert (output.stdout, output.truncated) == ("a\rb\ufffdc\n", False)


def test_the_default_cap_is_far_above_any_expected_output() -> None:
    # checks/burnin/check.py: an 8-GPU 12 h burn-in's sampling JSON stays near 3 MB.
    assert DEFAULT_OUTPUT_CAP >= 5 * 3_000_000


@pytest.mark.timeout(120)
def test_it_cuts_a_runaway_remote_command_over_ssh(testbed) -> None:
    node = testbed.node("gpu03")
    cap, size = 128 * 1024, 8 * 1024 * 1024
    target = NodeTarget(
        hostname="gpu03",
        address=node.address,
        port=node.port,
        user=testbed.ssh_user,
        key_path=str(testbed.client_key_path),
        known_hosts=testbed.known_hosts_path.read_text(),
        connect_timeout=5,
        output_cap=cap,
    )
    transport = SSHTransport(target)
    try:
        transport.open()
        output = transport.run(flood("stdout", size))
        small = transport.run(flood("stdout", 1000))
        cipher = transport.connection.transport.remote_cipher
    finally:
        transport.close()
    assert output.exit_code == 0 and output.truncated
    head, tail = expected(size + 9, cap)
    assert output.stdout.startswith(head) and output.stdout.endswith(tail)
    assert f"[... {size + 9 - cap} bytes cut by Kiln" in output.stdout
    assert len(output.stdout) < cap + 200
    assert not small.truncated and small.stdout == "START" + "x" * 1000 + "END\n"
    assert cipher == "aes128-gcm@openssh.com"  # read through the AEAD cipher Kiln prefers (worker/ssh.py)
