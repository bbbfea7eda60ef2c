"""Operators' inventory pages: add and edit a cluster, add nodes by node set (with a preview), edit
one node, and import nodes. Thin: the forms adapt, the inventory services validate and write (the
same as `kiln cluster`, `kiln nodes` and the REST API).

Node import: choose a format and a file, read the plan (a dry run), then apply it. The preview
carries the file's text to the apply step, which plans it again against the nodes as they are then,
all or nothing (services.nodes_import_file)."""

from __future__ import annotations

from ClusterShell.NodeSet import NodeSet
from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from portal.inventory import importers, services
from portal.inventory.forms import ClusterForm, NodeForm, NodesAddForm, show_error
from portal.inventory.importers.plan import Action, ImportPlan
from portal.inventory.models import Cluster, Node, Transport
from portal.inventory.services import InventoryError, nodes_import_file
from portal.roles import OPERATOR, role_required

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


def _cluster_form_page(request: HttpRequest, form: ClusterForm, cluster: Cluster | None) -> HttpResponse:
    return render(request, "inventory/cluster_form.html", {"form": form, "cluster": cluster})


@role_required(OPERATOR)
def cluster_create(request: HttpRequest) -> HttpResponse:
    form = ClusterForm(request.POST or None, instance=Cluster(), user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            cluster = services.cluster_save(cluster=form.instance, fields=form.changes())
        except InventoryError as exc:
            show_error(form, exc)
        else:
            messages.success(request, f"Cluster {cluster.name} added: now add its nodes.")
            _warn_without_host_keys(request, cluster)
            return redirect("inventory:node_add", cluster.name)
    return _cluster_form_page(request, form, None)


@role_required(OPERATOR)
def cluster_edit(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    form = ClusterForm(request.POST or None, instance=cluster, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            services.cluster_save(cluster=form.instance, fields=form.changes())
        except InventoryError as exc:
            show_error(form, exc)
        else:
            messages.success(request, f"Cluster {cluster.name} saved.")
            _warn_without_host_keys(request, cluster)
            return redirect("inventory:cluster_detail", cluster.name)
    return _cluster_form_page(request, form, Cluster.objects.get(pk=cluster.pk))  # as stored, not as typed


def _warn_without_host_keys(request: HttpRequest, cluster: Cluster) -> None:
    # The same warning as `kiln cluster create`: host keys are verified, so none means no connection.
    if cluster.transport == Transport.SSH and not cluster.known_hosts:
        messages.warning(
            request,
            "No known_hosts given: every connection will be refused until host keys are added "
            "(Edit cluster, the admin, or pinned fingerprints).",
        )


@role_required(OPERATOR)
def node_add(request: HttpRequest, name: str) -> HttpResponse:
    """Preview (a dry run of the same service) or add; the preview's form posts the same fields again."""
    cluster = get_object_or_404(Cluster, name=name)
    form = NodesAddForm(request.POST or None)
    preview = None
    if request.method == "POST" and form.is_valid():
        apply = "add" in request.POST
        try:
            report = services.nodes_add(
                cluster=cluster,
                hostnames=form.cleaned_data["nodes"],
                addresses=form.cleaned_data["address"],
                fields=form.node_fields(),
                dry_run=not apply,
            )
        except InventoryError as exc:
            show_error(form, exc)
        else:
            if apply:
                messages.success(request, f"Nodes of {cluster.name}: {_added(report)}.")
                return redirect("inventory:cluster_detail", cluster.name)
            preview = {"created": _folded(report.created), "updated": _folded(report.updated), "text": _added(report)}
    return render(request, "inventory/node_add.html", {"cluster": cluster, "form": form, "preview": preview})


def _folded(hostnames: list[str]) -> str:
    return str(NodeSet.fromlist(hostnames)) if hostnames else ""


def _added(report: services.AddReport) -> str:
    parts = [f"{len(report.created)} added ({_folded(report.created)})"] if report.created else []
    if report.updated:
        parts.append(f"{len(report.updated)} already there, updated ({_folded(report.updated)})")
    return ", ".join(parts)


@role_required(OPERATOR)
def node_edit(request: HttpRequest, name: str, hostname: str) -> HttpResponse:
    node = get_object_or_404(Node.objects.select_related("cluster"), cluster__name=name, hostname=hostname)
    form = NodeForm(request.POST or None, instance=node)
    if request.method == "POST" and form.is_valid():
        try:
            services.node_save(node=form.instance, fields=form.changes())
        except InventoryError as exc:
            show_error(form, exc)
        else:
            messages.success(request, f"Node {node.hostname} saved.")
            return redirect("history:node_detail", node.cluster.name, node.hostname)
    stored = Node.objects.get(pk=node.pk)  # the title and links name the node as stored, not as typed
    return render(request, "inventory/node_form.html", {"form": form, "node": stored, "cluster": node.cluster})
