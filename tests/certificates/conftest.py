"""Fixtures for the certificate tests: a site key per test, approvers of both sides, a campaign
whose runs are set up through the run services (no worker, no broker)."""

from __future__ import annotations

from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from portal.certificates import keys, services
from portal.certificates.models import Campaign
from portal.execution.groups import execute_run_inline
from portal.inventory.models import Cluster
from portal.runs.models import Run
from tests.portal.conftest import cluster, make_run, quick_plan  # noqa: F401  (shared fixtures)
from tests.portal.helpers import add_measurement, set_result


def write_key(path: Path) -> Path:
    key = Ed25519PrivateKey.generate()
    path.write_bytes(
        key.private_bytes(
            encoding=serialization.Encoding.PEM,
            format=serialization.PrivateFormat.PKCS8,
            encryption_algorithm=serialization.NoEncryption(),
        )
    )
    return path


@pytest.fixture(autouse=True)
def site_key(settings, tmp_path: Path) -> Path:
    """Every test signs with its own site keys (KILN_KEY_DIR); charts are off unless a test turns them on."""
    settings.KILN_KEY_DIR = str(tmp_path / "keys")
    settings.KILN_CERT_CHARTS = "0"
    keys.keyring_init(site="Test site")
    return Path(settings.KILN_KEY_DIR)


@pytest.fixture
def users(make_user):
    """operator, viewer, a vendor approver, a customer approver."""
    return {
        "operator": make_user("olga", "operator"),
        "viewer": make_user("victor", "viewer"),
        "vendor": make_user("vera", "approver", "vendor"),
        "customer": make_user("carl", "approver", "customer"),
    }


def finish(run: Run, statuses: dict[tuple[str, str], str] | None = None, default: str = "pass") -> Run:
    """Give every result of `run` a final status (default pass, overrides per (host, item)) and a GPU
    inventory; then close the run."""
    statuses = statuses or {}
    for result in run.results.select_related("node"):
        status = statuses.get((result.node.hostname, result.item_key), default)
        r = set_result(
            run,
            result.node.hostname,
            result.item_key,
            status,
            reason=f"{status} on purpose",
            stdout=f"raw output of {result.item_key} on {result.node.hostname}",
            finished_at=timezone.now(),
        )
        if result.kind == "gpu_inventory":
            for gpu in range(2):
                add_measurement(r, "gpu_uuid", gpu=gpu, text=f"GPU-{result.node.hostname}-{gpu}")
                add_measurement(r, "gpu_serial", gpu=gpu, text=f"SN{result.node.hostname}{gpu}")
        else:
            add_measurement(
                r,
                "volatile_uncorrected",
                gpu=0,
                value=0.0 if status == "pass" else 2.0,
                threshold="<= 0",
                ok=status == "pass",
            )
    run.status = "fail" if "fail" in statuses.values() else "pass"
    run.started_at = run.started_at or timezone.now()
    run.finished_at = timezone.now()
    run.save()
    return run


@pytest.fixture
def campaign(cluster: Cluster, quick_plan, users) -> Campaign:  # noqa: F811
    return services.campaign_create(cluster=cluster, plan=quick_plan, name="c1 acceptance", user=users["operator"])


@pytest.fixture
def campaign_run(campaign: Campaign, users) -> Callable[..., Run]:
    """Start a run of the campaign's plan (nodes: a node set, default all) and finish it."""

    def make(node_set: str = "", statuses: dict[tuple[str, str], str] | None = None) -> Run:
        run = services.campaign_run_start(campaign=campaign, node_set=node_set, user=users["operator"], enqueue=False)
        return finish(run, statuses)

    return make


@pytest.fixture
def issued(campaign: Campaign, campaign_run, users):
    """A certificate: n02 failed ECC and was waived; both sides signed."""
    campaign_run(statuses={("n02", "ecc-health"): "fail"})
    services.waiver_grant(
        campaign=campaign,
        hostname="n02",
        item_key="ecc-health",
        justification="GPU 0 replaced under RMA",
        user=users["vendor"],
    )
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.certificate_sign(campaign=campaign, user=users["customer"])
    return services.certificate_issue(campaign_id=campaign.pk)  # what the task behind the signature does


def execute_inline(run: Run) -> None:
    """Run what the page enqueued (the `demo` fixture catches it) in this thread, as
    `kiln_run --inline` does."""
    workers = 1 if connection.vendor == "sqlite" else 8  # SQLite has one writer at a time
    execute_run_inline(
        run_id=run.pk, node_ids=list(run.results.values_list("node_id", flat=True).distinct()), max_workers=workers
    )
    run.refresh_from_db()


@pytest.fixture
def demo(transactional_db, monkeypatch) -> None:
    """The demo cluster (kiln_demo); runs and certificate issuing are caught instead of queued: the
    test runs them (execute_inline, certificate_issue_task)."""
    monkeypatch.setattr("portal.runs.services._enqueue", lambda run_id, node_ids: None)
    monkeypatch.setattr("portal.certificates.services.issuing._enqueue_issue", lambda campaign_id: None)
    call_command("kiln_demo", stdout=StringIO())
