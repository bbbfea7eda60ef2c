"""Every input an operator reaches, walked: the portal's forms, and the admin forms an operator gets
when a superuser has also made them staff. None may choose what executes on a Kiln host (a program,
a path, an environment, a transport) or what a check runs on the nodes (its params, a run's plan
snapshot). docs/security.md lists each input and why it is safe."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest
from django import forms
from django.contrib import admin
from django.test import RequestFactory
from django.urls import reverse

import portal
from portal.inventory.models import Cluster

pytestmark = pytest.mark.django_db

# Model fields that choose what executes, where, or with which host file or environment.
EXECUTABLE_FIELDS = {
    "inventory.cluster": {"transport", "ssh_key_path"},
    "inventory.node": {"local_env"},
    "health.clusterhealthsettings": {"controller_key_path"},
    "catalog.checkdefinition": {"params", "kind"},
    "catalog.testplanitem": {"param_overrides", "check_definition"},
    "runs.run": {"plan_snapshot", "cluster", "node_set"},
    "runs.checkresult": {"command", "item_key", "node"},
    "health.scheduleraction": {"argv", "action", "node"},
}
# Any field whose name says it does (a net for fields added later).
EXECUTABLE_NAME = re.compile(
    r"(^|_)(env|environ|path|transport|argv|command|cmd|program|binary|exec|launcher|params|param_overrides|"
    r"plan_snapshot|script|shell)($|_)"
)


def portal_forms() -> list[type[forms.BaseForm]]:
    """Every form class defined in the portal's modules (imported, then found by subclassing)."""
    for module in pkgutil.walk_packages(portal.__path__, "portal."):
        if module.name.rsplit(".", 1)[-1] in ("views", "forms"):
            importlib.import_module(module.name)
    found: list[type[forms.BaseForm]] = []
    stack: list[type] = [forms.BaseForm]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith("portal."):
            found.append(cls)
    return found


def test_it_finds_the_portal_forms() -> None:
    names = {f"{f.__module__}.{f.__name__}" for f in portal_forms()}
    assert {"portal.health.forms.HealthSettingsForm", "portal.health.forms.ScheduleForm"} <= names
    assert "portal.runs.views.RunStartForm" in names


def test_it_offers_no_executable_field_in_any_portal_form() -> None:
    """Node sets, plans and check keys only pick among what exists (nodes, superuser-made plans)."""
    never = {
        "transport",
        "controller_transport",
        "ssh_key_path",
        "controller_key_path",
        "local_env",
        "controller_env",
        "scontrol_path",
        "kubectl_path",
        "params",
        "param_overrides",
        "plan_snapshot",
        "argv",
        "command",
        "kind",
    }
    offending = {
        f"{form.__module__}.{form.__name__}.{name}"
        for form in portal_forms()
        for name in form.base_fields
        if name in never or EXECUTABLE_NAME.search(name)
    }
    assert offending == set()


def test_the_health_settings_form_holds_no_program_path_env_or_transport() -> None:
    from portal.health.forms import HealthSettingsForm

    assert set(HealthSettingsForm.base_fields) == {
        "alert_emails",
        "webhook_url",
        "webhook_format",
        "hook_mode",
        "controller_host",
        "controller_port",
        "controller_user",
        "controller_known_hosts",
        "kubectl_context",
    }


def admin_editable(user) -> dict[str, set[str]]:
    """{model label: fields the user can set} over every admin page and inline, add and change."""
    request = RequestFactory().get("/admin/")
    request.user = user
    editable: dict[str, set[str]] = {}
    for model, model_admin in admin.site._registry.items():
        label = model._meta.label_lower
        for obj, change in ((None, False), (model.objects.first(), True)):
            allowed = (
                model_admin.has_change_permission(request, obj) if change else model_admin.has_add_permission(request)
            )
            if change and obj is None:
                continue
            if allowed:
                form = model_admin.get_form(request, obj, change=change)
                readonly = set(model_admin.get_readonly_fields(request, obj))
                editable.setdefault(label, set()).update(set(form.base_fields) - readonly)
            for inline in model_admin.get_inline_instances(request, obj):
                inline_label = inline.model._meta.label_lower
                if inline.has_add_permission(request, obj) or inline.has_change_permission(request, obj):
                    formset = inline.get_formset(request, obj)
                    readonly = set(inline.get_readonly_fields(request, obj))
                    fields = set(formset.form.base_fields) - readonly - {"id", "DELETE"}
                    editable.setdefault(inline_label, set()).update(fields)
    return editable


@pytest.fixture
def admin_world(cluster, make_run):
    """One row of every model the walk opens on its change page."""
    make_run(cluster)
    from portal.health.models import ClusterHealthSettings

    ClusterHealthSettings.objects.create(cluster=cluster)
    return cluster


def test_a_staff_operator_can_edit_no_executable_field_in_the_admin(admin_world, make_user) -> None:
    operator = make_user("op", "operator")
    operator.is_staff = True
    operator.save()
    editable = admin_editable(operator)
    assert editable["inventory.cluster"] >= {"name", "ssh_user", "known_hosts", "jump_host"}, "the walk sees forms"
    offending = {
        f"{label}.{name}"
        for label, names in editable.items()
        for name in names
        if name in EXECUTABLE_FIELDS.get(label, set()) or EXECUTABLE_NAME.search(name)
    }
    assert offending == set()
    for label in ("runs.run", "runs.checkresult", "runs.measurement", "catalog.checkdefinition", "catalog.testplan"):
        assert label not in editable, f"{label} is editable by an operator"


def test_a_superuser_chooses_the_transport_and_key_path_in_the_admin(admin_world, make_user) -> None:
    """The positive control of the walk above: the fields exist and are found when allowed."""
    root = make_user("root", superuser=True)
    root.is_staff = True
    root.save()
    editable = admin_editable(root)
    assert {"transport", "ssh_key_path"} <= editable["inventory.cluster"]
    assert "controller_key_path" in editable["health.clusterhealthsettings"]
    assert "params" in editable["catalog.checkdefinition"]
    assert "local_env" not in editable["inventory.node"], "set by server code only, for everyone"
    assert "runs.run" not in editable, "runs are evidence; their plan snapshot is what executes"


def test_a_staff_operator_posting_the_cluster_admin_cannot_change_its_transport_or_key(
    admin_world, client, make_user
) -> None:
    operator = make_user("op", "operator")
    operator.is_staff = True
    operator.save()
    client.force_login(operator)
    url = reverse("admin:inventory_cluster_change", args=[admin_world.pk])
    data = {
        "name": "c1",
        "profile": "H100-SXM-8",
        "ssh_user": "root",
        "ssh_port": 22,
        "scheduler": "none",
        "threshold_overrides": "{}",
        "check_settings": "{}",
        "transport": "ssh",
        "ssh_key_path": "/etc/kiln/signing_key.pem",
        "customer": "renamed by the operator",
        "queue": "site-b",  # which workers take its tasks: an operator's (docs/security.md)
        "nodes-TOTAL_FORMS": 0,
        "nodes-INITIAL_FORMS": 0,
    }
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    cluster = Cluster.objects.get(pk=admin_world.pk)
    assert (cluster.customer, cluster.queue) == ("renamed by the operator", "site-b"), "the edit went through"
    assert (cluster.transport, cluster.ssh_key_path) == ("local", ""), "but not the superuser's fields"


@pytest.mark.parametrize("role,status", [("viewer", 403), ("approver", 403), ("operator", 200)])
def test_only_operators_reach_the_forms_that_set_what_runs(client, cluster, make_user, role, status) -> None:
    client.force_login(make_user("u", role))
    for url in (
        reverse("health:settings", args=["c1"]),
        reverse("runs:run_start", args=["c1"]),
        reverse("health:schedule_create"),
    ):
        assert client.get(url).status_code == status, url


def test_anonymous_users_reach_none_of_them(client, cluster) -> None:
    for url in (reverse("health:settings", args=["c1"]), reverse("runs:run_start", args=["c1"])):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]
