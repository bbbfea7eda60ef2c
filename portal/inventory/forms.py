"""The add and edit forms of clusters and nodes (operators). The rules are the model's validators and
the inventory services' (the command line and the REST API use the same): a form only adapts them
to the page, and puts a service's refusal at its field (`show_error`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from portal.inventory import nodesets
from portal.inventory.models import Cluster, Node
from portal.inventory.services import NODE_EDITABLE_FIELDS, InventoryError
from portal.roles import SUPERUSER_FIELDS

# What an operator sets on a cluster: how its nodes are reached and by which workers. transport and
# ssh_key_path (SUPERUSER_FIELDS) are added for superusers only; threshold_overrides and
# check_settings (JSON) stay with the admin and the API.
CLUSTER_FIELDS = [
    *("name", "customer", "site", "profile", "scheduler", "ssh_user", "ssh_port", "jump_host", "known_hosts"),
    "queue",
    # What the plan pickers preselect and estimate with (as `kiln cluster update` and the API set them).
    *("acceptance_plan", "check_overhead_s"),
]
CLUSTER_SUPERUSER_FIELDS = list(SUPERUSER_FIELDS["inventory.cluster"])
# The node fields the add form gives every node of the set (the REST API's NodesAddSerializer has the
# same); the address is its own field, one address or an address set.
NODES_ADD_FIELDS = ["ssh_port", "rack", "position", "group", "serial", "expected_gpus"]


def show_error(form: forms.BaseForm, exc: InventoryError) -> None:
    """A service's refusal on the form: the whole message above it (the words the command line and
    the API print), and each refused field's messages at that field where the form has it."""
    form.add_error(None, str(exc))
    for field, messages in exc.fields.items():
        if field in form.fields and field not in form.errors:
            form.add_error(field, messages)


class ClusterForm(forms.ModelForm):
    """Add a cluster, or edit one (its name is then fixed: renaming stays with the admin and the API,
    where a certified cluster's rename is refused)."""

    class Meta:
        model = Cluster
        # Never the transport or the key path, for anyone: no portal form holds a field that chooses
        # what runs on a Kiln host or which of its files is read (a superuser sets them in the admin,
        # the API or `kiln cluster`).
        fields = list(CLUSTER_FIELDS)
        widgets = {"known_hosts": forms.Textarea(attrs={"rows": 6, "cols": 100, "spellcheck": "false"})}
        labels = {"ssh_user": "SSH user", "ssh_port": "SSH port"}

    def __init__(self, *args: Any, user: AbstractBaseUser | AnonymousUser, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.superuser = bool(getattr(user, "is_superuser", False))
        if self.instance.pk is not None:
            del self.fields["name"]

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean()
        # The page never offers these fields; a request that sends them anyway is refused in words
        # rather than silently half-applied.
        sent = [name for name in CLUSTER_SUPERUSER_FIELDS if name in self.data]
        if sent:
            raise forms.ValidationError(
                f"only a superuser may set {' and '.join(sent)}, in the admin, the API or `kiln cluster`: they "
                "choose what runs on a Kiln host, and which of its files is read"
            )
        return cleaned

    def validate_unique(self) -> None:
        # A taken name is refused by the service, in the same words as `kiln cluster create`.
        pass

    def changes(self) -> dict[str, Any]:
        return {name: self.cleaned_data[name] for name in self.fields}


def _node_fields() -> dict[str, forms.Field]:
    """The node fields of NODES_ADD_FIELDS as the model defines them (lengths, ranges), optional."""
    fields = forms.fields_for_model(Node, fields=NODES_ADD_FIELDS)
    for field in fields.values():
        field.required = False
    return fields


class NodesAddForm(forms.Form):
    """Add nodes by node set, as `kiln nodes add` and POST /api/v1/nodes/ do: nodes that exist are
    updated with the fields given, never duplicated."""

    nodes = forms.CharField(
        max_length=nodesets.MAX_TEXT,
        label="Hostnames",
        help_text="A node set, e.g. gpu[001-064] or gpu[01-04,07].",
        widget=forms.TextInput(attrs={"size": 40, "placeholder": "gpu[001-064]", "spellcheck": "false"}),
    )
    address = forms.CharField(
        max_length=nodesets.MAX_TEXT,
        required=False,
        help_text="Empty: the hostname. One address for one node, or an address set as long as the hostnames, "
        "e.g. 10.0.0.[1-64].",
        widget=forms.TextInput(attrs={"size": 40, "placeholder": "10.0.0.[1-64]", "spellcheck": "false"}),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields.update(_node_fields())

    def node_fields(self) -> dict[str, Any]:
        """The optional fields given (an empty one leaves an existing node's value alone)."""
        return {name: self.cleaned_data[name] for name in NODES_ADD_FIELDS if self.cleaned_data[name] not in ("", None)}


class NodeForm(forms.ModelForm):
    """One node's fields (services.NODE_EDITABLE_FIELDS)."""

    class Meta:
        model = Node
        fields = list(NODE_EDITABLE_FIELDS)
        labels = {"ssh_port": "SSH port", "expected_gpus": "Expected GPUs"}

    def validate_unique(self) -> None:
        # The cluster is not on the form, so the model's (cluster, hostname) rule is checked by the
        # service's full validation, which names it.
        pass

    def changes(self) -> dict[str, Any]:
        return {name: self.cleaned_data[name] for name in self.fields}
