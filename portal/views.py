"""Pages. Short views: they adapt HTTP to selectors and services."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from portal.catalog.models import TestPlan
from portal.inventory.models import Cluster
from portal.roles import OPERATOR, VIEWER, has_role
from portal.runs import selectors, services
from portal.runs.models import STATUS_COLOURS, Run

View = Callable[..., HttpResponse]


def role_required(role: str) -> Callable[[View], View]:
    """Login is enforced by middleware everywhere; this adds the role check (403 otherwise)."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not has_role(request.user, role):
                raise PermissionDenied(f"this page needs the {role} role")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


@role_required(VIEWER)
def cluster_list(request: HttpRequest) -> HttpResponse:
    return render(request, "inventory/cluster_list.html", {"clusters": selectors.cluster_list()})


@role_required(VIEWER)
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    return render(
        request,
        "inventory/cluster_detail.html",
        {
            "cluster": cluster,
            "nodes": selectors.cluster_nodes_with_last_status(cluster=cluster),
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


@role_required(OPERATOR)
def run_start(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    form = RunStartForm(request.POST or None, initial={"plan": "quick"})
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
            return redirect("run_detail", run_id=run.pk)
    all_nodes = list(cluster.nodes.values_list("hostname", flat=True))
    from ClusterShell.NodeSet import NodeSet

    return render(
        request,
        "runs/run_start.html",
        {"cluster": cluster, "form": form, "all_nodes": str(NodeSet.fromlist(all_nodes)) if all_nodes else ""},
    )


@role_required(VIEWER)
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("cluster", "requested_by"), pk=run_id)
    grid = selectors.run_grid(run=run, problems_only=request.GET.get("problems") == "1")
    context = {"run": run, "grid": grid, "can_operate": has_role(request.user, OPERATOR)}
    if request.headers.get("HX-Request"):
        return render(request, "runs/_run_grid.html", context)
    return render(request, "runs/run_detail.html", context)


@require_POST
@role_required(OPERATOR)
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    count = services.run_cancel(run=run, reason=f"cancelled by {request.user.get_username()}")
    messages.info(request, f"Cancelled {count} queued check(s); running checks finish and are recorded.")
    return redirect("run_detail", run_id=run.pk)


@role_required(VIEWER)
def result_detail(request: HttpRequest, result_id: int) -> HttpResponse:
    try:
        result = selectors.result_detail(result_id=result_id)
    except selectors.CheckResult.DoesNotExist:
        from django.http import Http404

        raise Http404("no such result") from None
    return render(
        request,
        "runs/result_detail.html",
        {"result": result, "table": selectors.measurement_table(result=result), "colours": STATUS_COLOURS},
    )


def plotly_js(request: HttpRequest) -> HttpResponse:
    """plotly.js from the installed plotly package: air-gapped sites load nothing from a CDN, and the
    JS always matches the Python figure builder's version."""
    from pathlib import Path

    import plotly
    from django.http import FileResponse

    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    response = FileResponse(path.open("rb"), content_type="application/javascript")
    response["Cache-Control"] = f"private, max-age={7 * 24 * 3600}"
    return response
