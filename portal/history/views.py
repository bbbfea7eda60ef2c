"""History pages: a node's timeline and trends, a cluster's runs, run comparison, result search and
exports. Thin views: forms adapt the query string, selectors read, figures draw."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django import forms
from django.core.paginator import Page, Paginator
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from portal.health import selectors as health_selectors
from portal.history import exports, figures, selectors
from portal.inventory import nodesets
from portal.inventory.models import Cluster, Node
from portal.roles import OPERATOR, VIEWER, has_role, role_required
from portal.runs.models import STATUS_COLOURS, Run, Status
from portal.urlmaker import url_maker

PAGE_SIZE = 50
# Nodes per page of a comparison: each is a row per key metric and changed status (8-10), and the
# template costs ~4 ms a node (measured at 1,250 nodes: 100 a page was 770 ms of rendering).
COMPARE_NODES = 25


def _page(request: HttpRequest, items: Any, per_page: int = PAGE_SIZE) -> Page:
    """The requested page; a bad or too-large page number gives the nearest valid page, not a 404."""
    return Paginator(items, per_page).get_page(request.GET.get("page"))


@role_required(VIEWER)
def node_detail(request: HttpRequest, name: str, hostname: str) -> HttpResponse:
    try:
        node = selectors.node_get(cluster_name=name, hostname=hostname)
    except Node.DoesNotExist:
        raise Http404("no such node") from None
    page = _page(request, selectors.node_results(node=node))
    trends = selectors.node_trends(node=node)
    hostname = node.hostname
    result_url = url_maker("runs:result_detail")
    charts = [
        {"div": f"trend-{t.metric.key}", "figure": figures.trend_figure(trend=t, result_url=result_url, node=hostname)}
        for t in trends
    ]
    return render(
        request,
        "history/node_detail.html",
        {
            "node": node,
            "cluster": node.cluster,
            "page": page,
            "entries": selectors.timeline_entries(results=page.object_list, hostname=node.hostname),
            "health": health_selectors.node_health_history(node=node),
            "charts": charts,
            "trend_runs": selectors.TREND_RUNS,
            "metrics": selectors.KEY_METRICS,
            "colours": STATUS_COLOURS,
            "can_operate": has_role(request.user, OPERATOR),
        },
    )


@role_required(VIEWER)
def cluster_runs(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    page = _page(request, selectors.cluster_runs(cluster=cluster), per_page=25)
    page.object_list = selectors.with_counts(list(page.object_list))
    counts = selectors.cluster_run_counts(cluster=cluster)
    chart = figures.run_counts_figure(rows=counts, run_url=url_maker("runs:run_detail")) if counts else None
    return render(
        request,
        "history/cluster_runs.html",
        {"cluster": cluster, "page": page, "charts": [{"div": "run-counts", "figure": chart}] if chart else []},
    )


class CompareForm(forms.Form):
    a = forms.IntegerField(
        label="Run A", min_value=1, widget=forms.NumberInput(attrs={"list": "recent-runs", "style": "width: 8em"})
    )
    b = forms.IntegerField(
        label="Run B (baseline)",
        min_value=1,
        required=False,
        help_text="empty: the run before A on its cluster",
        widget=forms.NumberInput(attrs={"list": "recent-runs", "style": "width: 8em"}),
    )
    worse = forms.BooleanField(label="Only what got worse", required=False)


# The query parameters that make a visit a submission of the compare form; `cluster` alone (the
# cluster pages' "Compare two runs" link) only opens the picker on that cluster's runs.
COMPARE_FIELDS = ("a", "b", "worse")


@role_required(VIEWER)
def run_compare(request: HttpRequest) -> HttpResponse:
    submitted = any(field in request.GET for field in COMPARE_FIELDS)
    form = CompareForm(request.GET if submitted else None)
    context: dict[str, Any] = {"form": form, "comparison": None}
    status = 200
    if form.is_bound and form.is_valid():
        a_id, b_id = form.cleaned_data["a"], form.cleaned_data["b"]
        runs = {r.pk: r for r in Run.objects.select_related("cluster").filter(pk__in=[a_id, b_id or a_id])}
        a = runs.get(a_id)
        b = runs.get(b_id) if b_id else (selectors.run_previous(run=a) if a else None)
        if a is None:
            form.add_error("a", f"there is no run #{a_id}")
        elif b_id and b is None:
            form.add_error("b", f"there is no run #{b_id}")
        elif b is None:
            form.add_error("b", f"run #{a.pk} is the first run of {a.cluster.name}: pick a run to compare it with")
        elif a.pk == b.pk:
            form.add_error("b", "pick two different runs")
        else:
            comparison = selectors.runs_compare(a=a, b=b, only_worse=form.cleaned_data["worse"])
            context.update(comparison=comparison, page=_page(request, comparison.nodes, per_page=COMPARE_NODES))
            form = CompareForm({**request.GET.dict(), "b": b.pk})  # show the default baseline in the form
            form.is_valid()
            context["form"] = form
    if form.is_bound and form.errors:
        status = 400
    cluster = context["comparison"].a.cluster if context["comparison"] else _cluster(request.GET.get("cluster"))
    recent = selectors.runs_recent(cluster=cluster, limit=RECENT_RUNS)
    chosen = {"a": _run_id(form, "a"), "b": _run_id(form, "b")}
    if not form.is_bound:
        chosen = _first_choice(recent, cluster)
        context["form"] = CompareForm(initial=chosen)
    context.update(cluster=cluster, recent=_recent_picks(recent, {**chosen, "cluster": request.GET.get("cluster", "")}))
    return render(request, "history/compare.html", context, status=status)


# The runs offered to pick on the compare page: the last 20 of the cluster (a month of nightly sweeps
# is 30; older runs are one click away on the cluster's runs page, or typed by number).
RECENT_RUNS = 20


def _cluster(name: str | None) -> Cluster | None:
    return Cluster.objects.filter(name=name).first() if name else None


def _first_choice(recent: list[Run], cluster: Cluster | None) -> dict[str, int | None]:
    """A first visit's runs: the newest as A and the one before it as B, one click from comparing.
    Without a cluster B stays empty (the run before A on A's own cluster): the two newest runs of
    the site may be two clusters'."""
    a = recent[0].pk if recent else None
    b = recent[1].pk if cluster is not None and len(recent) > 1 else None
    return {"a": a, "b": b}


def _run_id(form: forms.Form, field: str) -> int | None:
    value = form.cleaned_data.get(field) if hasattr(form, "cleaned_data") else None
    return value if isinstance(value, int) else None


def _recent_picks(runs: list[Run], chosen: dict[str, Any]) -> list[dict[str, Any]]:
    """Each recent run with the links that make it run A (compared with the run before it, or
    with the B already chosen) or run B (against the A already chosen)."""
    base = reverse("history:run_compare")
    keep = {"cluster": chosen["cluster"]} if chosen["cluster"] else {}
    picks = []
    for run in runs:
        keeps_b = bool(chosen["b"]) and chosen["b"] != run.pk
        as_a = {"a": run.pk, **({"b": chosen["b"]} if keeps_b else {}), **keep}
        as_b = {"a": chosen["a"], "b": run.pk, **keep} if chosen["a"] and chosen["a"] != run.pk else None
        picks.append(
            {
                "run": run,
                "a_url": f"{base}?{urlencode(as_a)}",
                "b_url": f"{base}?{urlencode(as_b)}" if as_b else "",
                "keeps_b": keeps_b,
                "is_a": run.pk == chosen["a"],
                "is_b": run.pk == chosen["b"],
            }
        )
    return picks


class ResultSearchForm(forms.Form):
    cluster = forms.CharField(required=False, widget=forms.TextInput(attrs={"list": "clusters", "size": 12}))
    node = forms.CharField(
        required=False,
        help_text="a node set, e.g. gpu[01-08,12]",
        widget=forms.TextInput(attrs={"placeholder": "gpu[01-08]", "size": 18}),
    )
    check = forms.CharField(
        required=False, help_text="check key or kind", widget=forms.TextInput(attrs={"list": "checks", "size": 16})
    )
    status = forms.ChoiceField(required=False, choices=[("", "any")] + list(Status.choices))
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}), help_text="inclusive")

    def clean_cluster(self) -> Cluster | None:
        name = self.cleaned_data["cluster"].strip()
        if not name:
            return None
        try:
            return Cluster.objects.get(name=name)
        except Cluster.DoesNotExist:
            raise forms.ValidationError(f"there is no cluster named {name!r}") from None

    def clean_node(self) -> NodeSet | None:
        text = self.cleaned_data["node"].strip()
        if not text:
            return None
        try:
            return nodesets.parse(text)  # bounded: refused before expanding when too large
        except nodesets.NodeSetTooLarge as exc:
            raise forms.ValidationError(str(exc)) from None
        except nodesets.NodeSetError as exc:
            raise forms.ValidationError(f"not a node set ({exc}); write e.g. gpu[01-08,12]") from None

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            raise forms.ValidationError("'since' is after 'until'")
        return data

    def filters(self) -> selectors.ResultFilter:
        def day(d: dt.date | None, *, plus: int = 0) -> dt.datetime | None:
            if d is None:
                return None
            return timezone.make_aware(dt.datetime.combine(d + dt.timedelta(days=plus), dt.time()))

        data = self.cleaned_data
        return selectors.ResultFilter(
            cluster=data["cluster"],
            nodes=data["node"],
            check=data["check"].strip(),
            status=data["status"],
            since=day(data["since"]),
            until=day(data["until"], plus=1),  # inclusive: up to the end of that day
        )


_FORMATS = ("csv", "json")


@role_required(VIEWER)
def result_search(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    form = ResultSearchForm(request.GET)
    fmt = request.GET.get("format", "")
    if fmt and fmt not in _FORMATS:
        form.add_error(None, f"unknown export format {fmt!r}: use csv or json")
    if not form.is_valid():
        if fmt:
            return HttpResponse(_error_text(form), status=400, content_type="text/plain; charset=utf-8")
        return render(request, "history/results.html", _search_context(form, None), status=400)
    results = selectors.results_search(filters=form.filters())
    if fmt:
        meta = {"filters": {k: v for k, v in request.GET.items() if k not in ("format", "page") and v}}
        return exports.results_export(results=results, fmt=fmt, filename="kiln-results", meta=meta)
    return render(request, "history/results.html", _search_context(form, _page(request, results)))


def _error_text(form: forms.Form) -> str:
    lines = []
    for field, errors in form.errors.items():
        text = "; ".join(str(e) for e in errors)
        lines.append(text if field == "__all__" else f"{field}: {text}")
    return "bad filter:\n" + "\n".join(lines) + "\n"


def _search_context(form: ResultSearchForm, page: Page | None) -> dict[str, Any]:
    return {
        "form": form,
        "page": page,
        "colours": STATUS_COLOURS,
        "cluster_names": list(Cluster.objects.values_list("name", flat=True)),
        "check_names": selectors.check_names(),
    }


@role_required(VIEWER)
def run_results_export(request: HttpRequest, run_id: int, fmt: str) -> StreamingHttpResponse:
    run = get_object_or_404(Run.objects.select_related("cluster"), pk=run_id)
    results = selectors.results_search(filters=selectors.ResultFilter(run=run)).order_by(
        "node__hostname", "position", "id"
    )
    meta = {"run": run.pk, "cluster": run.cluster.name, "plan": run.plan_snapshot.get("slug"), "status": run.status}
    return exports.results_export(results=results, fmt=fmt, filename=f"kiln-run-{run.pk}-results", meta=meta)


@role_required(VIEWER)
def run_measurements_export(request: HttpRequest, run_id: int) -> StreamingHttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    return exports.measurements_export(run=run)
