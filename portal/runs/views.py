"""Run and result pages, and the cluster list and cluster page (they show each cluster's runs and
each node's latest verdicts, which the run models hold). Short views: they adapt HTTP to selectors
and services."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.http import urlencode
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator
from django.views.decorators.http import require_POST

from portal.catalog.models import TestPlan
from portal.inventory.models import Cluster
from portal.roles import OPERATOR, VIEWER, has_role, role_required
from portal.runs import cells, estimates, grid, selectors, services, triage
from portal.runs.models import STATUS_COLOURS, Run, Status


@role_required(VIEWER)
def cluster_list(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "inventory/cluster_list.html",
        {"clusters": selectors.cluster_list(), "can_operate": has_role(request.user, OPERATOR)},
    )


NODES_PAGE = 100  # a 1,250-node cluster page rendered 1 MB in ~0.6 s unpaginated


@role_required(VIEWER)
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    page = Paginator(cluster.nodes.order_by("hostname"), NODES_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "inventory/cluster_detail.html",
        {
            "cluster": cluster,
            "page": page,
            "nodes": selectors.cluster_nodes_with_last_status(cluster=cluster, nodes=list(page.object_list)),
            "runs": selectors.cluster_runs(cluster=cluster, limit=20),
            "colours": STATUS_COLOURS,
            "can_operate": has_role(request.user, OPERATOR),
        },
    )


class RunStartForm(forms.Form):
    plan = forms.ModelChoiceField(queryset=TestPlan.objects.all(), to_field_name="slug", empty_label=None)
    node_set = forms.CharField(
        required=False,
        label="Nodes",
        help_text="A node set such as gpu[01-04,07]. Empty: every node of the cluster.",
        widget=forms.TextInput(attrs={"placeholder": "all nodes", "size": 40}),
    )

    def __init__(self, *args: Any, cluster: Cluster, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        plan = self.fields["plan"]
        assert isinstance(plan, forms.ModelChoiceField)
        found = estimates.plan_estimates(cluster=cluster)
        plan.choices = estimates.choices(found)  # the cluster's acceptance plan first, with durations
        default = estimates.default_plan(found)
        if default is not None:
            self.initial.setdefault("plan", default.slug)


@role_required(OPERATOR)
def run_start(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster.objects.select_related("acceptance_plan"), name=name)
    form = RunStartForm(request.POST or None, cluster=cluster)
    if request.method == "POST" and form.is_valid():
        try:
            nodes = services.nodes_select(cluster=cluster, node_set=form.cleaned_data["node_set"])
            run = services.run_start(
                cluster=cluster, plan=form.cleaned_data["plan"], nodes=nodes, requested_by=request.user
            )
        except services.RunStartError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Run #{run.pk} started on {len(nodes)} node(s).")
            return redirect("runs:run_detail", run_id=run.pk)
    all_nodes = list(cluster.nodes.values_list("hostname", flat=True))
    from ClusterShell.NodeSet import NodeSet

    return render(
        request,
        "runs/run_start.html",
        {"cluster": cluster, "form": form, "all_nodes": str(NodeSet.fromlist(all_nodes)) if all_nodes else ""},
    )


# The live poll asks for the rows that changed since its last answer, with some overlap: result
# times come from the workers' clocks, which may run a little behind this server's.
LIVE_OVERLAP_S = 10.0


@role_required(VIEWER)
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run page: the whole run's summary and triage, then one page of the grid (grid.PAGE_ROWS
    nodes in hostname order), filtered in the database (`problems=1`, `state=`, `nodes=` a node set
    or part of a hostname), `page=N`, or `node=HOST` for the page that holds that node's row.

    htmx polls it while the run is active: `?since=T` (the summary's poll) answers with the summary
    and only the rows of the page that changed since T, swapped out of band; when the run finished,
    a multi-node result moved, or the filter follows the results (a node enters or leaves it as its
    checks finish), the whole grid answers instead, retargeted at #run-grid. A plain htmx request
    gets the whole grid. The triage box rides along out of band whenever what it shows changed since
    the poll's last answer (`triaged`)."""
    run = get_object_or_404(Run.objects.select_related("cluster", "requested_by"), pk=run_id)
    grid_filter = grid.GridFilter.from_params(request.GET)
    since = _timestamp(request.GET.get("since"))
    now = timezone.now()
    htmx = bool(request.headers.get("HX-Request"))
    live = htmx and since is not None and run.is_active and not grid_filter.follows_results
    changed_since = since - timedelta(seconds=LIVE_OVERLAP_S) if live and since else None
    found = grid.run_grid(
        run=run,
        grid_filter=grid_filter,
        page=request.GET.get("page"),
        node=request.GET.get("node", "").strip()[:253],  # a hostname's longest (inventory.Node)
        changed_since=changed_since,
    )
    here = reverse("runs:run_detail", args=[run.pk])
    kept = {**grid_filter.params(), **({"page": str(found.page.number)} if found.page.number > 1 else {})}
    # The poll keeps the filter and the page, and says which failures its triage box shows: a new
    # one swaps the box too.
    poll = {**kept, "since": f"{now.timestamp():.3f}", "triaged": found.triage_key}
    compact = live and found.partial
    triage_oob = htmx and request.GET.get("triaged") != found.triage_key
    context = {
        "run": run,
        "grid": found,
        "rows_html": grid_rows_html(found, oob=compact),
        "can_operate": has_role(request.user, OPERATOR),
        "poll_url": f"{here}?{urlencode(poll)}",
        "compact": compact,
        "triage_oob": triage_oob,
        "pages": _page_links(here, grid_filter, found.page),
        # The slowest nodes' rows, whatever the filter (a filter may leave them out).
        "slowest": [(host, seconds, _url(here, {"node": host})) for host, seconds in _slowest(run)],
        "filter_urls": {
            "all": _url(here, {k: v for k, v in grid_filter.params().items() if k != "problems"}),
            "problems": _url(here, {**grid_filter.params(), "problems": "1"}),
        },
        "states": cells.SHOWN_ORDER,
    }
    if not htmx or triage_oob:
        context["triage_lines"] = triage.run_triage(run_id=run.pk)
    if not htmx:
        context["events"] = selectors.run_events(run=run)
        return render(request, "runs/run_detail.html", context)
    response = render(request, "runs/_run_grid.html", context)
    if since is not None and not compact:
        # The summary polled, but the whole grid answers (the run finished, or a multi-node result
        # moved): swap the grid, not the summary.
        response["HX-Retarget"] = "#run-grid"
        response["HX-Reswap"] = "outerHTML"
        response["HX-Trigger"] = "kiln-grid-replaced"  # the chart links reload (charts/_run_links.html)
    return response


def _slowest(run: Run) -> list[tuple[str, float]]:
    return grid.slowest_nodes(run=run) if not run.is_active else []


def _url(path: str, params: dict[str, str]) -> str:
    return f"{path}?{urlencode(params)}" if params else path


def _page_links(path: str, grid_filter: grid.GridFilter, page: grid.GridPage) -> dict[str, str]:
    """first/previous/next/last -> the URL of that page with the filter kept ("" where there is none)."""

    def at(number: int) -> str:
        return _url(path, {**grid_filter.params(), **({"page": str(number)} if number > 1 else {})})

    return {
        "first": at(1) if page.has_previous else "",
        "previous": at(page.number - 1) if page.has_previous else "",
        "next": at(page.number + 1) if page.has_next else "",
        "last": at(page.pages) if page.has_next else "",
    }


def grid_rows_html(found: grid.RunGrid, *, oob: bool = False) -> list[SafeString]:
    """The grid's rows as HTML, every value escaped. Written here rather than in the template on
    purpose: a page of 100 nodes x 8 checks is 800 cells, which Django's template engine renders
    several times slower than this loop (bench/bench_pages.py). `oob`: each row is swapped out of
    band by the live poll, wrapped in <template> so a lone <tr> survives parsing. Node names link to
    the node's page, cells to their result; the row of the node asked for (`focus`) is marked."""
    prefix, _, suffix = reverse("runs:result_detail", args=[0]).rpartition("/0/")
    prefix, suffix = escape(prefix), escape(suffix)
    node_prefix, _, node_suffix = reverse("history:node_detail", args=[found.run.cluster.name, "0"]).rpartition("/0/")
    node_prefix, node_suffix = escape(node_prefix), escape(node_suffix)
    escaped: dict[str, str] = {}  # most reasons repeat ("all within spec"): escape each once

    def esc(text: str) -> str:
        out = escaped.get(text)
        if out is None:
            out = escaped[text] = escape(text)
        return out

    open_row, close_row = ("<template>", "</template>") if oob else ("", "")
    swap = ' hx-swap-oob="true"' if oob else ""
    # (status, started, reason) -> the cell's markup around its pk
    around: dict[tuple[str, bool, str], tuple[str, str]] = {}
    whys: dict[tuple[tuple[str, str], ...], str] = {}  # rows failing alike share their "Why"
    rows = []
    for row in found.rows:
        host = esc(row.node.hostname)
        node_url = f"{node_prefix}/{escape(quote(row.node.hostname, safe=''))}/{node_suffix}"
        mark = ' class="focus"' if row.node.id == found.focus else ""
        parts = [f'{open_row}<tr id="node-{row.node.id}"{mark}{swap}><td><a href="{node_url}">{host}</a></td>']
        for cell in row.cells:
            if cell is None:
                parts.append("<td></td>")
                continue
            key = (cell.status, cell.started, cell.reason)
            head_tail = around.get(key)
            if head_tail is None:
                state = esc(cell.shown)
                waiting = cell.shown == cells.WAITING and not cell.reason
                title = esc(WAITING_TITLE) if waiting else esc(cell.reason)
                # A passing cell's reason is on its result's page: as a title on every pass cell it
                # was most of the page (18 checks' sentences on each of 100 rows, ~200 KB).
                titled = f' title="{title}"' if cell.status != Status.PASS and title else ""
                head_tail = around[key] = (
                    f'<td><a class="cell {state}" href="{prefix}/',
                    f'/{suffix}"{titled}>{state}</a></td>',
                )
            parts.append(f"{head_tail[0]}{cell.pk}{head_tail[1]}")
        problems = row.problems
        signature = tuple((c.item_key, c.reason) for c in problems)
        why = whys.get(signature)
        if why is None:
            why = whys[signature] = _why_html(problems, esc)
        parts.append(f'<td class="reason">{why}</td></tr>{close_row}')
        rows.append(mark_safe("".join(parts)))  # every value above went through escape()
    return rows


WAITING_TITLE = "claimed by a worker; runs after this node's earlier checks"


def _why_html(problems: list[grid.GridCell], esc: Callable[[str], str]) -> str:
    """Each distinct reason once, after the checks that gave it (cells.why)."""
    return " · ".join(
        f"<b>{esc(', '.join(keys))}</b>: {esc(Truncator(reason).chars(160))}" for keys, reason in cells.why(problems)
    )


def _timestamp(value: str | None) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(value), tz=UTC) if value else None
    except (ValueError, OverflowError, OSError):
        return None


@require_POST
@role_required(OPERATOR)
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    count = services.run_cancel(run=run, reason=f"cancelled by {request.user.get_username()}")
    messages.info(
        request,
        f"Cancelled {count} check(s); running ones are being stopped on their nodes (see the run's log).",
    )
    return redirect("runs:run_detail", run_id=run.pk)


@require_POST
@role_required(OPERATOR)
def run_rerun(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("cluster", "plan"), pk=run_id)
    try:
        rerun = services.run_rerun(run=run, requested_by=request.user)
    except services.RunStartError as exc:
        messages.error(request, f"Nothing re-run: {exc}")
        return redirect("runs:run_detail", run_id=run.pk)
    messages.success(
        request, f"Run #{rerun.pk} re-runs the failed and errored nodes {rerun.node_set} of run #{run.pk}."
    )
    return redirect("runs:run_detail", run_id=rerun.pk)


@role_required(VIEWER)
def result_detail(request: HttpRequest, result_id: int) -> HttpResponse:
    try:
        result = selectors.result_detail(result_id=result_id)
    except selectors.CheckResult.DoesNotExist:
        raise Http404("no such result") from None
    return render(
        request,
        "runs/result_detail.html",
        {
            "result": result,
            "table": selectors.measurement_table(result=result),
            # Names only: a 24 h burn-in holds millions of points; the charts fetch them downsampled.
            "series": list(result.series.defer("x_packed", "y_packed", "view_packed")),
            "colours": STATUS_COLOURS,
        },
    )


@role_required(VIEWER)
def result_raw_output(request: HttpRequest, result_id: int, stream: str) -> StreamingHttpResponse:
    """The exact bytes a check's commands printed (as the transport read them), for download:
    never rendered (application/octet-stream, attachment), inflated a chunk at a time."""
    from portal.runs import rawoutput

    try:
        stored = selectors.result_raw_output(result_id=result_id, stream=stream)
    except (ValueError, selectors.CheckResult.DoesNotExist):
        raise Http404("no such result or output stream") from None
    if stored.compressed is None:
        raise Http404(
            "no raw output is stored for this result (nothing ran, it was recorded before Kiln kept it, "
            "or retention removed it: see Retention in the documentation)"
        )
    response = StreamingHttpResponse(rawoutput.unpack(stored.compressed), content_type="application/octet-stream")
    response["Content-Disposition"] = f'attachment; filename="kiln-result-{result_id}.{stream}"'
    response["X-Kiln-SHA256"] = stored.sha256  # what `sha256sum` of the file gives, and what a certificate cites
    return response
