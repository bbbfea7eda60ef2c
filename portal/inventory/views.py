"""Node import page: choose a format and a file, read the plan (a dry run), then apply it.
Operators only. The preview carries the file's text to the apply step, which plans it again
against the nodes as they are then, all or nothing (services.nodes_import_file)."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from portal.inventory import importers
from portal.inventory.importers.plan import Action, ImportPlan
from portal.inventory.models import Cluster
from portal.inventory.services import InventoryError, nodes_import_file
from portal.roles import OPERATOR
from portal.views import role_required

FORMAT_CHOICES = [(key, label) for key, (label, _) in importers.FORMATS.items()]


class UploadForm(forms.Form):
    format = forms.ChoiceField(choices=FORMAT_CHOICES, initial="csv")
    file = forms.FileField()


class ApplyForm(forms.Form):
    format = forms.ChoiceField(choices=FORMAT_CHOICES, widget=forms.HiddenInput)
    text = forms.CharField(strip=False, widget=forms.HiddenInput)


def _plan(request: HttpRequest, cluster: Cluster, fmt: str, data: bytes, *, dry_run: bool) -> ImportPlan | None:
    try:
        return nodes_import_file(cluster=cluster, fmt=fmt, data=data, dry_run=dry_run)
    except InventoryError as exc:
        messages.error(request, f"Import refused, nothing was imported: {exc}")
        return None


@role_required(OPERATOR)
def node_import(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    upload, plan, apply_form = UploadForm(), None, None
    if request.method == "POST" and "apply" in request.POST:
        form = ApplyForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data["text"].encode()
            plan = _plan(request, cluster, form.cleaned_data["format"], data, dry_run=False)
            if plan is not None:
                messages.success(request, f"Nodes imported: {plan.summary()}.")
                return redirect("inventory:cluster_detail", cluster.name)
        else:
            messages.error(request, "Import: the preview was lost; choose the file again.")
    elif request.method == "POST":
        upload = UploadForm(request.POST, request.FILES)
        if upload.is_valid():
            fmt = upload.cleaned_data["format"]
            data = upload.cleaned_data["file"].read(importers.MAX_IMPORT_BYTES + 1)
            plan = _plan(request, cluster, fmt, data, dry_run=True)
            # The apply step posts the text back (multipart, so it is counted unencoded): only when
            # Django accepts a form field that large; 64 KiB is room for the other fields.
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            if plan is not None and (limit is None or len(data) + 65536 < limit):
                apply_form = ApplyForm(initial={"format": fmt, "text": data.decode("utf-8-sig")})
            elif plan is not None:
                messages.warning(request, "This file is too large to apply from the browser: use `kiln nodes import`.")
    context = {
        "cluster": cluster,
        "upload": upload,
        "plan": plan,
        "apply_form": apply_form,
        "changes": [(c.action.value, c.hostname, c.line().split(None, 1)[1]) for c in plan.changes] if plan else [],
        "writes": plan is not None and bool(plan.of(Action.CREATE) or plan.of(Action.UPDATE)),
    }
    return render(request, "inventory/node_import.html", context)
