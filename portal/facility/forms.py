"""Forms of the facility page. Each item form saves through its service (save_item), which checks the
rules across rows. A credential is write-only: its inputs never show a stored or typed value, the
form says only whether one is set, an empty input keeps the stored one, and a box clears it."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from portal.facility import services
from portal.facility.models import CoolingLoop, Pdu, Rack, Ups, breakers_parse, breakers_text
from portal.inventory.models import Cluster


def show_error(form: forms.BaseForm, exc: services.FacilityError) -> None:
    """A service's refusal on the form: at its field when the form has it, else above the form."""
    placed = [f for f in exc.fields if f in form.fields]
    for field in placed:
        form.add_error(field, exc.fields[field])
    if len(placed) < len(exc.fields) or not placed:
        form.add_error(None, str(exc))


class WriteOnlyTextInput(forms.TextInput):
    """A text input that never renders a value, not even the one just posted."""

    def format_value(self, value: Any) -> str | None:
        return None


class CredentialFields(forms.Form):
    """The user name, password and 'clear' inputs of an endpoint's credential (mixed into a ModelForm)."""

    username = forms.CharField(
        required=False, max_length=128, label="User name", widget=WriteOnlyTextInput(attrs={"autocomplete": "off"})
    )
    password = forms.CharField(
        required=False,
        max_length=256,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )
    clear_credential = forms.BooleanField(required=False, label="Clear the stored credential")

    def credential_status(self, instance: Any) -> None:
        state = "set" if instance.credential_sealed else "not set"
        self.fields[
            "password"
        ].help_text = f"Stored credential: {state}. Leave both empty to keep it; it is sealed, and never shown again."

    def credential_change(self) -> services.CredentialChange:
        data = self.cleaned_data
        clear = bool(data.get("clear_credential"))
        return services.CredentialChange(data.get("username") or "", data.get("password") or "", clear)


class ItemForm(forms.ModelForm):
    """A facility item's form, bound to its cluster."""

    def __init__(self, *args: Any, cluster: Cluster, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cluster = cluster
        if "racks" in self.fields:
            field = self.fields["racks"]
            assert isinstance(field, forms.ModelMultipleChoiceField)
            field.queryset = Rack.objects.filter(cluster=cluster)
            field.widget = forms.CheckboxSelectMultiple()
            field.widget.choices = field.choices
            field.required = False

    def save_item(self) -> Any:
        raise NotImplementedError


class RackForm(ItemForm):
    class Meta:
        model = Rack
        fields = ["name", "power_budget_kw", "cooling_budget_kw", "room", "row", "position"]
        help_texts = {"name": "As the nodes' rack field has it. Renaming a rack renames it on its nodes."}

    def save_item(self) -> Rack:
        return services.rack_save(rack=self.instance)


class PduForm(ItemForm, CredentialFields):
    breaker_a = forms.CharField(
        label="Breaker (A)", max_length=100, help_text="One rating for every phase (32), or one per phase (32;32;16)."
    )

    class Meta:
        model = Pdu
        fields = ["rack", "name", "feed", "phases", "voltage_v", "breaker_a", "endpoint_url", "verify_tls"]
        labels = {"voltage_v": "Voltage (V, phase-to-neutral)", "endpoint_url": "Redfish endpoint"}

    def __init__(self, *args: Any, cluster: Cluster, **kwargs: Any) -> None:
        super().__init__(*args, cluster=cluster, **kwargs)
        rack = self.fields["rack"]
        assert isinstance(rack, forms.ModelChoiceField)
        rack.queryset = Rack.objects.filter(cluster=cluster)
        if self.instance.pk and isinstance(self.instance.breaker_a, list):
            self.initial["breaker_a"] = breakers_text(self.instance.breaker_a)
        self.credential_status(self.instance)

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        phases, text = data.get("phases"), data.get("breaker_a")
        if phases and isinstance(text, str):
            try:
                data["breaker_a"] = breakers_parse(text, int(phases))
            except ValidationError as exc:
                self.add_error("breaker_a", exc)
        return data

    def save_item(self) -> Pdu:
        return services.pdu_save(pdu=self.instance, credential=self.credential_change())


class UpsForm(ItemForm):
    class Meta:
        model = Ups
        fields = ["name", "capacity_kw", "racks"]
        labels = {"capacity_kw": "Capacity (kW)", "racks": "Racks it carries"}

    def save_item(self) -> Ups:
        return services.ups_save(ups=self.instance, racks=list(self.cleaned_data["racks"]))


class LoopForm(ItemForm, CredentialFields):
    class Meta:
        model = CoolingLoop
        fields = ["name", "fluid", "racks", "endpoint_url", "verify_tls"]
        labels = {"racks": "Racks it serves", "endpoint_url": "Redfish CoolingUnit endpoint"}

    def __init__(self, *args: Any, cluster: Cluster, **kwargs: Any) -> None:
        super().__init__(*args, cluster=cluster, **kwargs)
        self.credential_status(self.instance)

    def save_item(self) -> CoolingLoop:
        return services.loop_save(
            loop=self.instance, racks=list(self.cleaned_data["racks"]), credential=self.credential_change()
        )


class FeedLineForm(forms.Form):
    """One explicit feed of a node; a line left empty is ignored."""

    pdu = forms.ChoiceField(required=False, label="PDU")
    phase = forms.IntegerField(required=False, min_value=1, max_value=3)
    share = forms.FloatField(required=False, min_value=0, max_value=1, help_text="0-1")

    def __init__(self, *args: Any, pdus: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["pdu"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [("", "—"), *((name, name) for name in pdus)]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        filled = [name for name in ("pdu", "phase", "share") if data.get(name) not in (None, "")]
        if filled and len(filled) < 3:
            raise ValidationError("give a PDU, a phase and a share, or leave the line empty")
        return data

    def spec(self) -> services.FeedSpec | None:
        data = self.cleaned_data
        if not data.get("pdu"):
            return None
        return services.FeedSpec(data["pdu"], int(data["phase"]), float(data["share"]))


# A node with up to 8 power supplies (HGX B200 servers have 6; 8 leaves room) fits on one form.
FEED_LINES = 8
FeedFormSet = forms.formset_factory(FeedLineForm, extra=0, max_num=FEED_LINES, absolute_max=FEED_LINES)


class ImportForm(forms.Form):
    file = forms.FileField(label="Facility CSV")
