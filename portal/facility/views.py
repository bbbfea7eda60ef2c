"""Facility pages: a cluster's racks, PDUs, feeds, UPSes and loops (viewers read; operators edit,
import and delete), and its CSV export. Short views: selectors read, services write."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count, Model
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_POST

from portal.facility import csvio, importing, selectors, services
from portal.facility.forms import (
    FEED_LINES,
    FeedFormSet,
    ImportForm,
    ItemForm,
    LoopForm,
    PduForm,
    RackForm,
    UpsForm,
    show_error,
)
from portal.facility.models import CoolingLoop, Pdu, Rack, Ups
from portal.inventory.models import Cluster
from portal.ordering import natural_key
from portal.roles import OPERATOR, VIEWER, has_role, role_required

NODES_PAGE = 100  # as the cluster page: a page of nodes and their feeds stays small on 1,250 nodes


@dataclass(frozen=True)
class Kind:
    """An editable item kind: its model, its form, and what the pages call it."""

    model: type[Model]
    form: type[ItemForm]
    label: str


KINDS = {
    "rack": Kind(Rack, RackForm, "rack"),
    "pdu": Kind(Pdu, PduForm, "PDU"),
    "ups": Kind(Ups, UpsForm, "UPS"),
    "loop": Kind(CoolingLoop, LoopForm, "cooling loop"),
}


def _kind(kind: str) -> Kind:
    if kind not in KINDS:
        raise Http404("no such facility item kind")
    return KINDS[kind]


def _page_url(cluster: Cluster) -> str:
    return reverse("facility:page", args=[cluster.name])


@role_required(VIEWER)
def facility_page(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    hostnames = sorted(cluster.nodes.values_list("hostname", flat=True), key=natural_key)
    page = Paginator(hostnames, NODES_PAGE).get_page(request.GET.get("page"))
    shown = set(page.object_list)
    feeds: dict[str, list[selectors.FeedRow]] = {h: [] for h in page.object_list}
    for row in selectors.node_feeds(cluster=cluster):
        if row.node in shown:
            feeds[row.node].append(row)
    counts = dict(cluster.nodes.exclude(rack="").values_list("rack").annotate(n=Count("id")).values_list("rack", "n"))
    context = {
        "cluster": cluster,
        "racks": [(r, counts.get(r.name, 0)) for r in selectors.racks(cluster=cluster)],
        "pdus": selectors.pdus(cluster=cluster),
        "upses": [(u, selectors.rack_names(u)) for u in selectors.upses(cluster=cluster)],
        "loops": [(lp, selectors.rack_names(lp)) for lp in selectors.loops(cluster=cluster)],
        "feeds": feeds,
        "page": page,
        "gaps": selectors.model_gaps(cluster=cluster),
        "can_operate": has_role(request.user, OPERATOR),
        "import_form": ImportForm(),
    }
    return render(request, "facility/facility.html", context)


@sensitive_variables("form")
@sensitive_post_parameters("username", "password")
@role_required(OPERATOR)
def item_edit(request: HttpRequest, name: str, kind: str, pk: int | None = None) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    spec = _kind(kind)
    if pk is None:
        instance = spec.model() if spec.model is Pdu else spec.model(cluster=cluster)
    else:
        instance = get_object_or_404(spec.model, pk=pk, cluster=cluster)
    form = spec.form(request.POST or None, instance=instance, cluster=cluster)
    if request.method == "POST" and form.is_valid():
        try:
            item = form.save_item()
        except services.FacilityError as exc:
            show_error(form, exc)
        else:
            messages.success(request, f"{spec.label.capitalize()} {item} saved.")
            return redirect(_page_url(cluster))
    context = {"cluster": cluster, "form": form, "label": spec.label, "item": instance if pk else None}
    return render(request, "facility/item_form.html", context)


@require_POST
@role_required(OPERATOR)
def item_delete(request: HttpRequest, name: str, kind: str, pk: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    spec = _kind(kind)
    item = get_object_or_404(spec.model, pk=pk, cluster=cluster)
    try:
        services.item_delete(item=item)  # type: ignore[arg-type]  # KINDS holds only facility items
    except services.FacilityError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{spec.label.capitalize()} {item} deleted.")
    return redirect(_page_url(cluster))


@role_required(OPERATOR)
def node_feeds(request: HttpRequest, name: str, hostname: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    node = get_object_or_404(cluster.nodes, hostname=hostname)
    pdu_names = [p.name for p in selectors.pdus(cluster=cluster)]
    rows = node.feeds.order_by("pdu__name", "phase").values_list("pdu__name", "phase", "share")
    current = [{"pdu": p, "phase": k, "share": s} for p, k, s in rows]
    # Initial values only on GET: a posted line equal to its initial would count as unchanged, and be dropped.
    initial = None if request.method == "POST" else current + [{}] * (FEED_LINES - len(current))
    formset = FeedFormSet(request.POST or None, initial=initial, form_kwargs={"pdus": pdu_names})
    if request.method == "POST" and formset.is_valid():
        specs = [s for form in formset.forms if (s := form.spec()) is not None]
        try:
            services.node_feeds_set(node=node, feeds=specs)
        except services.FacilityError as exc:
            messages.error(request, str(exc))
        else:
            what = f"{len(specs)} explicit feed(s)" if specs else "the default feeds"
            messages.success(request, f"Node {node.hostname} now draws through {what}.")
            return redirect(_page_url(cluster))
    defaults = [f for f in selectors.default_feeds(cluster=cluster) if f.node == node.hostname]
    context = {"cluster": cluster, "node": node, "formset": formset, "defaults": defaults, "explicit": bool(current)}
    return render(request, "facility/node_feeds.html", context)


@require_POST
@role_required(OPERATOR)
def import_csv(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        messages.error(request, "Import: choose a CSV file.")
        return redirect(_page_url(cluster))
    try:
        upload = form.cleaned_data["file"]
        text = csvio.decode(upload.read(csvio.MAX_CSV_BYTES + 1))
        report = importing.facility_import_csv(cluster=cluster, text=text)
    except csvio.CsvError as exc:
        messages.error(request, f"Import refused, nothing was imported: {exc}")
    else:
        messages.success(request, f"Imported: {report.summary()}.")
    return redirect(_page_url(cluster))


@role_required(VIEWER)
def export_csv(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    response = HttpResponse(csvio.export_csv(cluster=cluster), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="facility-{cluster.name}.csv"'
    return response
