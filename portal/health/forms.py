"""Forms of the health pages."""

from __future__ import annotations

from typing import Any

from django import forms

from portal.catalog.models import TestPlan
from portal.health.models import ClusterHealthSettings
from portal.inventory.models import Cluster
from portal.runs.estimates import QUICK_PLAN, plan_choices


class ScheduleForm(forms.Form):
    name = forms.CharField(max_length=100, initial="Nightly quick sweep")
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.all(), to_field_name="name", empty_label=None)
    plan = forms.ModelChoiceField(queryset=TestPlan.objects.all(), to_field_name="slug", empty_label=None)
    node_set = forms.CharField(
        required=False,
        label="Nodes",
        help_text="A node set such as gpu[01-04,07]. Empty: every node of the cluster.",
        widget=forms.TextInput(attrs={"placeholder": "all nodes", "size": 40}),
    )
    crontab = forms.CharField(
        max_length=100,
        initial="0 2 * * *",
        help_text="minute hour day-of-month month day-of-week, in UTC; e.g. 0 2 * * * (nightly), 0 * * * * (hourly).",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        plan = self.fields["plan"]
        assert isinstance(plan, forms.ModelChoiceField)
        plan.choices = plan_choices()  # shortest first, with durations
        self.initial.setdefault("plan", QUICK_PLAN)  # a nightly sweep, whichever plan is shortest


class HealthSettingsForm(forms.ModelForm):
    """What an operator sets for a cluster's alerts and hooks. Nothing here names a program, a path,
    an environment or a transport on a Kiln host: those are server configuration
    (KILN_SCONTROL_PATH, KILN_KUBECTL_PATH, KILN_CONTROLLER_TRANSPORT), and the controller's key
    path is a superuser's, in the admin (docs/security.md). Unknown POSTed fields are ignored."""

    webhook_url = forms.URLField(required=False, max_length=500, assume_scheme="https", label="Webhook URL")

    class Meta:
        model = ClusterHealthSettings
        fields = [
            "alert_emails",
            "webhook_url",
            "webhook_format",
            "hook_mode",
            "controller_host",
            "controller_port",
            "controller_user",
            "controller_known_hosts",
            "kubectl_context",
        ]
        widgets = {
            "alert_emails": forms.Textarea(attrs={"rows": 2, "cols": 60}),
            "controller_known_hosts": forms.Textarea(attrs={"rows": 2, "cols": 80}),
        }
