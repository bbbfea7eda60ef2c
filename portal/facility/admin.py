"""Admin registrations of the facility model. An endpoint's credential is write-only here as on the
facility page: the change form offers user name and password inputs that never show a value, says
whether one is set, and saves through the services (sealed, and only for the host it was entered
for). Lists show whether a credential is set, never what it is. Explicit feeds are edited on the
facility page, where a node's shares are checked together; here they are read-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db import transaction
from django.http import HttpRequest

from portal.facility import services
from portal.facility.forms import CredentialFields, show_error
from portal.facility.models import CoolingLoop, NodeFeed, Pdu, Rack, Ups
from portal.roles import ReadOnlyAdmin


class _DryRun(Exception):
    """Rolls back a trial save."""


class FacilityAdminForm(forms.ModelForm):
    """Checks the rules that span rows (names per cluster, phases in use, racks of the cluster, the
    credential's host) by a trial save through the service, rolled back, so that a refusal shows on
    the form rather than as a server error; save_model then saves for real."""

    def save_item(self) -> Any:
        return self.instance.save()

    def full_clean(self) -> None:
        super().full_clean()
        if not self.is_bound or self.errors:
            return
        instance = self.instance
        pk, adding, sealed = instance.pk, instance._state.adding, getattr(instance, "credential_sealed", None)
        try:
            with transaction.atomic():
                self.save_item()
                raise _DryRun
        except _DryRun:
            pass
        except services.FacilityError as exc:
            show_error(self, exc)
        finally:
            instance.pk, instance._state.adding = pk, adding
            if sealed is not None:
                instance.credential_sealed = sealed


class RackAdminForm(FacilityAdminForm):
    def save_item(self) -> Any:
        return services.rack_save(rack=self.instance)


class UpsAdminForm(FacilityAdminForm):
    def save_item(self) -> Any:
        return services.ups_save(ups=self.instance, racks=list(self.cleaned_data["racks"]))


class PduAdminForm(FacilityAdminForm, CredentialFields):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.credential_status(self.instance)

    def save_item(self) -> Any:
        return services.pdu_save(pdu=self.instance, credential=self.credential_change())


class LoopAdminForm(FacilityAdminForm, CredentialFields):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.credential_status(self.instance)

    def save_item(self) -> Any:
        racks = list(self.cleaned_data["racks"])
        return services.loop_save(loop=self.instance, racks=racks, credential=self.credential_change())


@admin.display(boolean=True, description="credential")
def credential_set(obj: Pdu | CoolingLoop) -> bool:
    return obj.has_credential


CREDENTIAL_INPUTS = ("username", "password", "clear_credential")


class FacilityAdmin(admin.ModelAdmin):
    """Saves through the form's service (already tried by the form's validation)."""

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = super().get_fields(request, obj)
        if obj is not None and not self.has_change_permission(request, obj):
            return [f for f in fields if f not in CREDENTIAL_INPUTS]  # a read-only view has nothing to enter
        return fields

    def save_model(self, request: HttpRequest, obj: Any, form: forms.ModelForm, change: bool) -> None:
        assert isinstance(form, FacilityAdminForm)
        form.save_item()


@admin.register(Rack)
class RackAdmin(FacilityAdmin):
    form = RackAdminForm
    list_display = ["name", "cluster", "power_budget_kw", "cooling_budget_kw", "room", "row", "position"]
    list_filter = ["cluster"]
    search_fields = ["name"]


@admin.register(Pdu)
class PduAdmin(FacilityAdmin):
    form = PduAdminForm
    list_display = [
        "name", "rack", "cluster", "feed", "phases", "voltage_v", "breaker_a", "endpoint_url", credential_set,
    ]  # fmt: skip
    list_filter = ["cluster", "feed"]
    search_fields = ["name"]
    fields = ["rack", "name", "feed", "phases", "voltage_v", "breaker_a", "endpoint_url", "verify_tls",
              "username", "password", "clear_credential"]  # fmt: skip


@admin.register(Ups)
class UpsAdmin(FacilityAdmin):
    form = UpsAdminForm
    list_display = ["name", "cluster", "capacity_kw"]
    list_filter = ["cluster"]
    filter_horizontal = ["racks"]


@admin.register(CoolingLoop)
class CoolingLoopAdmin(FacilityAdmin):
    form = LoopAdminForm
    list_display = ["name", "cluster", "fluid", "endpoint_url", credential_set]
    list_filter = ["cluster", "fluid"]
    filter_horizontal = ["racks"]
    fields = ["cluster", "name", "fluid", "racks", "endpoint_url", "verify_tls", "username", "password",
              "clear_credential"]  # fmt: skip


@admin.register(NodeFeed)
class NodeFeedAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    list_display = ["node", "pdu", "phase", "share"]
    list_filter = ["pdu__cluster"]
