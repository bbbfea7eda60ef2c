"""The certificate task in a real Celery worker process (PostgreSQL, Redis): the second signature,
committed, queues it; the worker renders, seals and records the certificate over the signed body."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from portal.certificates import services, verification
from portal.certificates.models import Certificate
from portal.certificates.seal import VALID
from tests.conftest import WorkerProcess, _flush_broker

pytestmark = pytest.mark.integration


@pytest.fixture
def worker_with_site_key(site_key: Path, real_services, transactional_db, tmp_path, monkeypatch) -> Iterator[None]:
    """A worker that signs with this test's site key (the key reaches it through the environment)."""
    monkeypatch.setenv("KILN_KEY_DIR", str(site_key))
    monkeypatch.setenv("KILN_CERT_CHARTS", "0")
    _flush_broker()
    worker = WorkerProcess(tmp_path / "worker.log")
    worker.start()
    yield
    worker.stop()
    _flush_broker()


def test_a_worker_issues_the_certificate_both_sides_signed(
    worker_with_site_key, campaign, campaign_run, users, tmp_path
) -> None:
    campaign_run()
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.certificate_sign(campaign=campaign, user=users["customer"])  # commits: the task is queued
    deadline = time.monotonic() + 60
    while not Certificate.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    certificate = Certificate.objects.get()
    campaign.refresh_from_db()
    assert campaign.issue_requested_at is None and campaign.issue_error == ""
    assert verification.certificate_verify(data=bytes(certificate.pdf)).status == VALID
    assert list(campaign.audit.filter(action="certificate issued").values_list("username", flat=True)) == ["system"]
    log = (tmp_path / "worker.log").read_text()
    assert "kiln.certificate_issue[" in log and "succeeded in" in log and certificate.number in log
