"""What a plain `celery -A worker worker` runs (worker/celery.py, portal/settings.py), the per-task
ledger line it logs, and the bench's reading of it (bench/fanout_peers.py)."""

from __future__ import annotations

import logging
import subprocess
import types

import click
import pytest
from celery.bin.worker import WorkersPool, _concurrency_value
from django.db import connection

from bench.fanout_peers import node_side_line, parse_ledger
from checks.core.base import Command
from worker.celery import _close_task, _open_ledger, app, pool_name, startup_line
from worker.db import db_phase, ledger, ledger_close, ledger_open, timed


def cli_context() -> click.Context:
    return click.Context(click.Command("worker"), obj=types.SimpleNamespace(app=app))


def test_it_runs_a_threads_pool_of_256_by_default() -> None:
    assert app.conf.worker_pool == "threads"
    assert app.conf.worker_concurrency == 256


def test_celery_without_flags_takes_the_pool_and_concurrency_from_the_settings() -> None:
    """`celery worker` passes its --pool default ('prefork') and no --concurrency: Celery must
    replace both with the configured values, or the documented command would run prefork x cores."""
    pool = WorkersPool().convert("prefork", None, cli_context())
    assert pool_name(pool) == "threads"
    assert _concurrency_value(cli_context(), None, None) == 256


def test_it_says_which_pools_do_not_enforce_time_limits() -> None:
    threads = startup_line(pool="threads", concurrency=64, db_connections=4)
    assert "threads pool, 64 tasks at once, at most 4 database connections" in threads
    assert "time limits are not enforced" in threads and "remote `timeout`" in threads
    prefork = startup_line(pool="prefork", concurrency=2, db_connections=4)
    assert "time limits" not in prefork and "at most 2 database connections (one per child process)" in prefork


def test_it_closes_the_threads_connection_and_logs_the_ledger_after_a_task(transactional_db, caplog) -> None:
    task = types.SimpleNamespace(name="kiln.run_node", request=types.SimpleNamespace(is_eager=False))
    _open_ledger(task=task, args=(7, 3))
    with db_phase("claim"):
        connection.ensure_connection()
        connection.cursor().execute("SELECT 1")
    connection.ensure_connection()  # the task used the database outside a phase too
    with caplog.at_level(logging.INFO, logger="kiln.worker"):
        _close_task(task=task)
    assert connection.connection is None
    assert ledger() is None
    [entry] = parse_ledger(caplog.text)
    assert (entry.run_id, entry.node_id) == (7, 3)
    assert entry.queries["claim"] == 1


def test_the_bench_reads_what_the_ledger_writes() -> None:
    book = ledger_open("kiln.run_node(12, 34)")
    try:
        with timed("connect"):
            pass
        book.add("record", 0.25, 70)
        book.add("record", 0.05, 5)
        book.notes.update(node="gpu01", commands_run=7, commands_shared=3)
    finally:
        ledger_close()
    [entry] = parse_ledger(f"[2026-01-01 00:00:00,000: INFO/MainProcess] kiln task {book.line()}\n")
    assert (entry.run_id, entry.node_id, entry.ran, entry.shared) == (12, 34, 7, 3)
    assert entry.parts["record"] == pytest.approx(0.3, abs=0.001)
    assert entry.queries["record"] == 75
    assert "connect" in entry.parts


def test_the_peers_line_runs_every_command_with_its_stdin(tmp_path) -> None:
    script = "import sys; print('read from stdin', sys.argv[1:])"
    commands = [
        Command(argv=("python3", "-"), stdin=script, timeout=10, label="probe"),
        Command(argv=("cat",), timeout=10),  # no stdin: closed, as Kiln's transport closes it
        Command(argv=("python3", "-", "again"), stdin=script, timeout=10),
        Command(argv=("sh", "-c", "exit 3"), timeout=10),
        Command(argv=("sh", "-c", 'echo "$KILN_X"'), timeout=10, env={"KILN_X": "env passed"}),
    ]
    line = node_side_line(commands)
    assert line.count(script) == 1  # the probe is written once and fed to each `python3 -`
    out = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.count("read from stdin") == 2 and "['again']" in out
    assert "env passed" in out
    assert out.strip().endswith("@@kiln-bench-done 1")


def test_the_bench_gives_the_nodes_all_but_the_first_quarter_of_the_cpus() -> None:
    from bench.bench_fanout import node_cpus

    assert node_cpus("auto", {0, 1}) == {1}
    assert node_cpus("auto", set(range(16))) == set(range(4, 16))
    assert node_cpus("auto", {0}) == {0}  # one CPU: nothing to split
    assert node_cpus("all", {0, 1}) == {0, 1}
    assert node_cpus("2-3,5", set(range(8))) == {2, 3, 5}
    for bad in ("0-1", "7", "x", ""):  # every CPU, one the machine lacks, not a list
        with pytest.raises(SystemExit, match="--node-cpus"):
            node_cpus(bad, {0, 1})
