"""`kiln run --wait`: how it follows a run (one small query a look) and prints the verdicts (no
measurement read for the table)."""

from __future__ import annotations

import time
from io import StringIO
from types import SimpleNamespace

import pytest
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.execution.management.commands import kiln_run
from portal.runs.models import CheckResult, Run, Status
from tests.portal.helpers import add_measurement, set_result


def command() -> kiln_run.Command:
    return kiln_run.Command(stdout=StringIO(), stderr=StringIO())


def test_the_table_lists_every_verdict_without_reading_measurements(cluster, make_run) -> None:
    run = make_run(cluster)
    for result in CheckResult.objects.filter(run=run):
        result.status, result.reason = Status.PASS, f"ok {result.node.hostname}"
        result.save()
        add_measurement(result, "temp", value=50.0)
    failed = set_result(run, "n03", run.results.order_by("position").first().item_key, Status.FAIL, "GPU 2 hot")
    Run.objects.filter(pk=run.pk).update(status=Status.FAIL, reason="1 failed")
    run.refresh_from_db()
    cmd = command()

    with CaptureQueriesContext(connection) as queries:
        cmd._print_table(run)

    lines = cmd.stdout.getvalue().splitlines()
    rows = list(CheckResult.objects.filter(run=run).order_by("node__hostname", "position", "id"))
    assert len(lines) == len(rows) + 1 and lines[-1] == f"run {run.pk}: fail (1 failed)"
    for line, row in zip(lines, rows, strict=False):
        assert line.split()[:3] == [row.node.hostname, row.item_key, row.status], line
    assert f"n03                  {failed.item_key:<16} fail     GPU 2 hot" in lines
    assert not any("runs_measurement" in q["sql"] for q in queries.captured_queries)
    assert kiln_run.exit_code(run) == 1


def test_a_finished_run_is_noticed_at_the_first_look(cluster, make_run) -> None:
    run = make_run(cluster)
    CheckResult.objects.filter(run=run).update(status=Status.PASS)
    Run.objects.filter(pk=run.pk).update(status=Status.PASS)
    cmd = command()

    with CaptureQueriesContext(connection) as queries:
        waited = cmd._wait(run, timeout=0, quiet=False)

    assert waited.status == Status.PASS
    total = CheckResult.objects.filter(run=run).count()
    assert cmd.stderr.getvalue().strip() == f"run {run.pk}: {total}/{total} checks done"
    assert len(queries.captured_queries) == 3  # the status, the counts, the run read back once


def test_each_look_at_a_running_run_is_one_query_when_quiet(cluster, make_run, monkeypatch) -> None:
    run = make_run(cluster)
    looks: list[float] = []
    clock = iter(range(100))  # one second further at each reading of the command's clock
    fake_time = SimpleNamespace(sleep=looks.append, monotonic=lambda: float(next(clock)))
    monkeypatch.setattr(kiln_run, "time", fake_time)

    with CaptureQueriesContext(connection) as queries, pytest.raises(CommandError, match="still queued after 3s"):
        command()._wait(run, timeout=3, quiet=True)

    assert looks == [kiln_run.WAIT_POLL_S] * 3
    assert len(queries.captured_queries) == 4  # one per look, the last one past the timeout
    assert all('"runs_checkresult"' not in q["sql"] for q in queries.captured_queries)


@pytest.mark.django_db(transaction=True)
def test_a_run_that_closes_wakes_the_waiting_command_at_once(cluster, make_run) -> None:
    from portal.runs.finalize import run_finalize

    run = make_run(cluster)
    listener = kiln_run._closes_listener()  # outside any transaction, as the command runs
    assert listener is not None
    CheckResult.objects.filter(run=run).update(status=Status.PASS)

    run_finalize(run_id=run.pk)

    started = time.monotonic()
    closed = [note.payload for note in listener.notifies(timeout=5, stop_after=1)]
    assert closed == [str(run.pk)]
    assert time.monotonic() - started < kiln_run.WAIT_POLL_S  # not a look's wait: the close woke it
