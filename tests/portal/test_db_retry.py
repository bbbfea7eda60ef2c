"""Recording a result survives a lost database connection (closed, backed off, retried on a fresh
one); a retry after a commit whose answer was lost changes nothing; what Kiln itself fails is the
portal's fault, and node health ignores it."""

from __future__ import annotations

import psycopg
import pytest
from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connection

from checks.core.base import Command, CommandOutput, Verdict
from checks.core.base import Measurement as CheckMeasurement
from portal.execution import execution
from portal.health.models import HealthTransition, NodeHealth
from portal.health.services import health_evaluate_run
from portal.runs import dbretry, services
from portal.runs.models import CheckResult, Measurement, Run
from portal.runs.recording import Record


class Flaky:
    """A write that loses its connection `failures` times, then succeeds."""

    def __init__(self, failures: int, error: type[Exception] = OperationalError) -> None:
        self.failures, self.error, self.attempts = failures, error, []

    def __call__(self, attempt: int) -> str:
        self.attempts.append(attempt)
        if len(self.attempts) <= self.failures:
            raise self.error("server closed the connection unexpectedly")
        return "written"


def test_it_retries_across_lost_connections_with_a_growing_back_off(monkeypatch) -> None:
    closed: list[bool] = []
    monkeypatch.setattr(connection, "close", lambda: closed.append(True))
    checked: list[bool] = []
    monkeypatch.setattr(dbretry, "connect_checked", lambda: checked.append(True))
    slept: list[float] = []
    write = Flaky(failures=4)

    assert dbretry.db_retry(write, what="test", sleep=slept.append) == "written"
    assert write.attempts == [1, 2, 3, 4, 5]
    assert slept == [0.5, 1.0, 2.0, 2.0]  # doubling, capped at MAX_DELAY_S
    assert closed == [True] * 4  # each retry on a fresh connection,
    assert checked == [True] * 4  # checked to answer before the write is tried again


def test_it_retries_an_interface_error_too(monkeypatch) -> None:
    monkeypatch.setattr(connection, "close", lambda: None)
    monkeypatch.setattr(dbretry, "connect_checked", lambda: None)
    write = Flaky(failures=1, error=InterfaceError)
    assert dbretry.db_retry(write, what="test", sleep=lambda s: None) == "written"


def test_it_gives_up_once_its_waits_would_pass_the_window(monkeypatch) -> None:
    monkeypatch.setattr(connection, "close", lambda: None)
    monkeypatch.setattr(dbretry, "connect_checked", lambda: None)
    slept: list[float] = []
    write = Flaky(failures=1000)

    with pytest.raises(OperationalError):
        dbretry.db_retry(write, what="test", sleep=slept.append)
    assert sum(slept) <= dbretry.RETRY_WINDOW_S < sum(slept) + dbretry.MAX_DELAY_S
    assert len(write.attempts) == len(slept) + 1 == 17  # 0.5 + 1 + 14 x 2 = 29.5 s of waiting


def test_a_database_that_keeps_dropping_writes_mid_try_is_outlasted(monkeypatch) -> None:
    """Killed mid-write ten times in a row (a database dropping every connection for a while):
    a fixed handful of tries would have given up; the window does not."""
    monkeypatch.setattr(connection, "close", lambda: None)
    monkeypatch.setattr(dbretry, "connect_checked", lambda: None)
    write = Flaky(failures=10)
    assert dbretry.db_retry(write, what="test", sleep=lambda s: None) == "written"
    assert len(write.attempts) == 11


def test_it_does_not_retry_other_database_errors(monkeypatch) -> None:
    write = Flaky(failures=1, error=IntegrityError)
    with pytest.raises(IntegrityError):
        dbretry.db_retry(write, what="test", sleep=lambda s: None)
    assert write.attempts == [1]


@pytest.mark.django_db
def test_it_does_not_retry_inside_an_outer_transaction() -> None:
    write = Flaky(failures=1)
    with pytest.raises(OperationalError):  # the test's own transaction: gone with the connection
        dbretry.db_retry(write, what="test", sleep=lambda s: None)
    assert write.attempts == [1]


def test_it_says_the_portal_failed() -> None:
    assert dbretry.portal_fault_reason(OperationalError("could not connect to server\nIs it running?")) == (
        "Kiln could not record this result: database error (OperationalError: could not connect to server)"
    )
    assert dbretry.portal_fault_reason(KeyError("x")) == "internal error in Kiln: KeyError: 'x'"


def _terminate_my_backend() -> None:
    """What a PostgreSQL restart or pg_terminate_backend does to this process's connection."""
    pid = connection.connection.info.backend_pid
    db = settings.DATABASES["default"]
    with psycopg.connect(
        host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"], dbname=db["NAME"], autocommit=True
    ) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.mark.django_db(transaction=True)
def test_it_records_a_result_after_its_connection_was_killed(real_services, cluster, make_run, monkeypatch) -> None:
    monkeypatch.setattr(dbretry, "FIRST_DELAY_S", 0.05)
    run = make_run(cluster)
    result = services.results_claim(run_id=run.pk, node_id=cluster.nodes.get(hostname="n01").pk, claim="t")[0]
    _terminate_my_backend()

    recorded = services.result_record(
        result=result,
        claim="t",
        verdict=Verdict("pass", "all within spec"),
        measurements=[CheckMeasurement(name="gpu_count", value=8)],
        stdout="{}",
    )

    assert recorded
    result.refresh_from_db()
    assert (result.status, result.reason, result.portal_fault) == ("pass", "all within spec", False)
    assert Measurement.objects.filter(result=result).count() == 1
    # The run closes across a killed connection too.
    services.results_fail_remaining(run_id=run.pk, node_id=result.node_id, claim="t", status="pass", reason="ok")
    CheckResult.objects.filter(run=run).exclude(pk=result.pk).update(status="pass")
    _terminate_my_backend()
    assert services.run_finalize(run_id=run.pk).status == "pass"


@pytest.mark.django_db(transaction=True)
def test_it_reports_recorded_when_the_commit_answer_was_lost(real_services, cluster, make_run, monkeypatch) -> None:
    monkeypatch.setattr(dbretry, "FIRST_DELAY_S", 0.05)
    run = make_run(cluster)
    result = services.results_claim(run_id=run.pk, node_id=cluster.nodes.get(hostname="n01").pk, claim="t")[0]
    real = services._result_write
    calls: list[bool] = []

    def commit_then_lose_the_answer(**kwargs: object) -> bool:
        calls.append(bool(kwargs["retry"]))
        written = real(**kwargs)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return written

    monkeypatch.setattr(services, "_result_write", commit_then_lose_the_answer)
    measurements = [CheckMeasurement(name="gpu_count", value=8)]

    assert services.result_record(result=result, claim="t", verdict=Verdict("pass", "ok"), measurements=measurements)
    assert calls == [False, True]
    assert Measurement.objects.filter(result=result).count() == 1  # written once
    # Another task's claim is never reported as recorded by a retry.
    other = Record(result=result, claim="other", fields={}, measurements=[], series=[])
    assert not real(record=other, retry=True, starting=None)


@pytest.mark.django_db
def test_it_marks_a_kiln_bug_as_the_portals_fault(cluster, make_run, monkeypatch) -> None:
    run = make_run(cluster)
    node = cluster.nodes.get(hostname="n01")

    class Transport:
        def run(self, command: Command) -> CommandOutput:
            return CommandOutput(command, "{}", "", 0)

        def close(self) -> None:
            return None

    def broken(*args: object, **kwargs: object) -> bool:
        raise KeyError("a Kiln bug")

    monkeypatch.setattr(execution, "open_transport", lambda target: Transport())
    monkeypatch.setattr(services, "record_write", broken)
    with pytest.raises(KeyError):
        execution.execute_node(run_id=run.pk, node_id=node.pk, claim="t")

    rows = set(CheckResult.objects.filter(run=run, node=node).values_list("status", "reason", "portal_fault"))
    assert rows == {("error", "internal error in Kiln: KeyError: 'a Kiln bug'", True)}


@pytest.mark.django_db
def test_node_health_ignores_the_portals_faults(cluster, make_run) -> None:
    run = make_run(cluster)
    NodeHealth.objects.bulk_create(NodeHealth(node=node, state="healthy") for node in cluster.nodes.all())
    CheckResult.objects.filter(run=run).update(status="pass", reason="ok")
    CheckResult.objects.filter(run=run, node__hostname="n02").update(
        status="error", reason="Kiln could not record this result: database error", portal_fault=True
    )
    CheckResult.objects.filter(run=run, node__hostname="n03", item_key="ecc-health").update(
        status="error", reason="internal error in Kiln: KeyError", portal_fault=True
    )
    Run.objects.filter(pk=run.pk).update(status="error")

    assert health_evaluate_run(run_id=run.pk) == []
    assert set(NodeHealth.objects.values_list("state", flat=True)) == {"healthy"}
    assert not HealthTransition.objects.exists()
    # The same errors, judged (the node's own): n03 degrades, n02 is unreachable.
    CheckResult.objects.filter(run=run).update(portal_fault=False)
    moved = {t.node.hostname: t.to_state for t in health_evaluate_run(run_id=run.pk)}
    assert moved == {"n02": "unreachable", "n03": "degraded"}
