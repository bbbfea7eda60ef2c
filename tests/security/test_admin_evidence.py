"""Runs and results are read-only in the admin for a staff operator: no change, no delete page, no
bulk "delete selected" (a delete there would leave no Kiln audit event). A superuser is the control."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.urls import reverse

from portal.runs.models import CheckResult, Measurement, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def evidence(cluster, make_run) -> tuple[Run, CheckResult, Measurement]:
    run = make_run(cluster)
    result = run.results.first()
    assert result is not None
    return run, result, Measurement.objects.create(result=result, name="temp", value=41.0)


def _staff(user: User) -> User:
    user.is_staff = True
    user.save()
    return user


def test_a_staff_operator_cannot_delete_or_change_runs_or_results(evidence, client, make_user) -> None:
    run, result, measurement = evidence
    assert not Group.objects.get(name="operator").permissions.filter(codename__startswith="delete_run").exists()
    assert not Group.objects.get(name="operator").permissions.filter(codename="delete_checkresult").exists()
    operator = _staff(make_user("op", "operator"))
    # Even granted by hand (an older group, a site's own), the admin does not delete evidence.
    operator.user_permissions.set(Permission.objects.filter(codename__in=["delete_run", "delete_checkresult"]))
    client.force_login(operator)
    for model, obj in (("run", run), ("checkresult", result), ("measurement", measurement)):
        changelist = client.get(reverse(f"admin:runs_{model}_changelist"))
        assert changelist.status_code == 200 and "delete_selected" not in changelist.content.decode(), model
        bulk = client.post(
            reverse(f"admin:runs_{model}_changelist"),
            {"action": "delete_selected", "_selected_action": [obj.pk], "post": "yes"},
        )
        assert bulk.status_code in (200, 302), model
        for page in ("delete", "change"):
            url = reverse(f"admin:runs_{model}_{page}", args=[obj.pk])
            assert client.post(url, {"post": "yes", "status": "pass"}).status_code == 403, (model, page)
        assert client.get(reverse(f"admin:runs_{model}_change", args=[obj.pk])).status_code == 200, "still read"
    assert Run.objects.filter(pk=run.pk, status=run.status).exists()
    assert CheckResult.objects.filter(pk=result.pk, status=result.status).exists()
    assert Measurement.objects.filter(pk=measurement.pk).exists()


def test_a_superuser_still_may_delete_them(evidence, client, make_user) -> None:
    """The control: the pages the operator was refused exist, and the walk above reaches them."""
    run, _, measurement = evidence
    client.force_login(_staff(make_user("root", superuser=True)))
    changelist = client.get(reverse("admin:runs_measurement_changelist")).content.decode()
    assert "delete_selected" in changelist
    assert client.get(reverse("admin:runs_run_delete", args=[run.pk])).status_code == 200
    response = client.post(reverse("admin:runs_measurement_delete", args=[measurement.pk]), {"post": "yes"})
    assert response.status_code == 302 and not Measurement.objects.filter(pk=measurement.pk).exists()
