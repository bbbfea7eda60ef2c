#!/usr/bin/env python3
"""Kiln perftest pair runner: one self-contained file, run on a node as `python3 - SPEC < rdma_pairs.py`.

SPEC (one JSON argument, built by checks/rdma/plan.py) lists the perftest processes this node runs
for the RDMA bandwidth check: for every rail, a server for its ring predecessor (`ib_write_bw -d
mlx5_k -p PORT ...`, `ib_write_lat ...`) and a client to its ring successor. Servers start at once;
each client starts at `start_at + offset_s` (one common moment on every node, so that every server
of the run is listening by then), and every process is stopped at its own deadline. Then one JSON
document is printed on stdout:

    {"schema": 1, "host": HOSTNAME, "start_at": T, "processes": [
        {"role": "bw_client", "rail": "mlx5_0", "peer": "gpu02", "argv": [...], "exit_code": 0,
         "timed_out": false, "error": "", "started": T1, "ended": T2, "stdout": "...", "stderr": "..."}]}

A process that could not be started has exit_code null and `error`; one stopped at its deadline has
`timed_out` true (a server whose client never came). The runner itself exits 0 once it printed the
document, 2 when SPEC is unusable. Standard library only, Python >= 3.8 syntax, no Kiln imports.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

SCHEMA = 1
# What is kept of each stream: perftest prints a few KB; a flood keeps its head and tail.
HEAD_BYTES = 64 * 1024
TAIL_BYTES = 16 * 1024
# A process asked to stop gets SIGTERM, then SIGKILL this long after.
KILL_GRACE_S = 3.0
# The furthest ahead start_at may be: a wrong clock, not a plan (power_soak's probe uses 600 s).
MAX_AHEAD_S = 600.0


def _read_capped(handle: Any) -> str:
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    handle.seek(0)
    if size <= HEAD_BYTES + TAIL_BYTES:
        data = handle.read()
    else:
        head = handle.read(HEAD_BYTES)
        handle.seek(size - TAIL_BYTES)
        cut = f"\n[... {size - HEAD_BYTES - TAIL_BYTES} bytes cut by Kiln ...]\n"
        data = head + cut.encode() + handle.read()
    return data.decode("utf-8", errors="replace")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _sleep_until(moment: float, stopping: threading.Event) -> None:
    while not stopping.is_set():
        left = moment - time.time()
        if left <= 0:
            return
        stopping.wait(min(left, 0.5))


def run_one(entry: dict[str, Any], start_at: float, stopping: threading.Event, out: dict[str, Any]) -> None:
    """Start one process at its moment, stop it at its deadline, and record what it printed."""
    out.update({k: entry.get(k) for k in ("role", "rail", "peer", "argv")})
    out.update({"exit_code": None, "timed_out": False, "error": "", "stdout": "", "stderr": ""})
    offset = entry.get("offset_s")
    if offset is not None:
        _sleep_until(start_at + float(offset), stopping)
    deadline = start_at + float(entry["deadline_s"])
    if stopping.is_set():
        out["error"] = "runner stopped before this process started"
        return
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        out["started"] = time.time()
        try:
            proc = subprocess.Popen(entry["argv"], stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)
        except OSError as exc:
            out["error"] = f"{entry['argv'][0]}: {exc.strerror or exc}"
            out["exit_code"] = 127
            return
        while proc.poll() is None and time.time() < deadline and not stopping.is_set():
            time.sleep(0.05)
        if proc.poll() is None:
            out["timed_out"] = True
            _stop(proc)
        out["exit_code"] = proc.returncode
        out["ended"] = time.time()
        out["stdout"] = _read_capped(stdout)
        out["stderr"] = _read_capped(stderr)


def main(argv: list[str]) -> int:
    try:
        spec = json.loads(argv[0])
        entries = list(spec["processes"])
        start_at: float | None = spec.get("start_at")
    except (IndexError, ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"usage: python3 - SPEC_JSON < rdma_pairs.py ({exc})\n")
        return 2
    now = time.time()
    if start_at is None:
        start_at = now
    if start_at - now > MAX_AHEAD_S:
        sys.stderr.write(f"start_at is {start_at - now:.0f} s ahead (more than {MAX_AHEAD_S:.0f} s): a wrong clock?\n")
        return 2
    stopping = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    results: list[dict[str, Any]] = [{} for _ in entries]
    threads = [
        threading.Thread(target=run_one, args=(entries[i], start_at, stopping, results[i]), daemon=True)
        for i in range(len(entries))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.5)
    doc = {"schema": SCHEMA, "host": socket.gethostname(), "start_at": start_at, "processes": results}
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
