"""Health pages and /metrics. Short views: selectors read, services write."""

from __future__ import annotations

import hmac

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from portal.health import conf, selectors, services
from portal.health.forms import HealthSettingsForm, ScheduleForm
from portal.health.models import HEALTH_COLOURS, ClusterHealthSettings, Schedule
from portal.inventory.models import Cluster
from portal.roles import OPERATOR, VIEWER, has_role, role_required

PAGE_SIZE = 50


@role_required(VIEWER)
def overview(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "health/overview.html",
        {"clusters": selectors.clusters_overview(), "states": selectors.STATE_ORDER, "colours": HEALTH_COLOURS},
    )


@role_required(VIEWER)
def cluster_health(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    problems = Paginator(selectors.problem_nodes(cluster=cluster), PAGE_SIZE).get_page(request.GET.get("page"))
    history = Paginator(selectors.transitions(cluster=cluster), 20).get_page(request.GET.get("tpage"))
    return render(
        request,
        "health/cluster.html",
        {
            "cluster": cluster,
            "dash": selectors.dashboard(cluster=cluster),
            "problems": problems,
            "history": history,
            "deliveries": selectors.deliveries(cluster=cluster)[:10],
            "actions": selectors.scheduler_actions(cluster=cluster)[:10],
            "schedules": selectors.schedules(cluster=cluster),
            "settings": ClusterHealthSettings.objects.filter(cluster=cluster).first(),
            "states": selectors.STATE_ORDER,
            "colours": HEALTH_COLOURS,
            "can_operate": has_role(request.user, OPERATOR),
            "trend_sweeps": conf.trend_sweeps(),
        },
    )


@role_required(VIEWER)
def deliveries(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    page = Paginator(selectors.deliveries(cluster=cluster), PAGE_SIZE).get_page(request.GET.get("page"))
    actions = Paginator(selectors.scheduler_actions(cluster=cluster), PAGE_SIZE).get_page(request.GET.get("apage"))
    return render(request, "health/deliveries.html", {"cluster": cluster, "page": page, "actions": actions})


@role_required(OPERATOR)
def health_settings(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    instance = ClusterHealthSettings.objects.filter(cluster=cluster).first() or ClusterHealthSettings(cluster=cluster)
    form = HealthSettingsForm(request.POST or None, instance=instance)
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, f"Health settings of {cluster.name} saved.")
        return redirect("health:cluster", name=cluster.name)
    return render(request, "health/settings.html", {"cluster": cluster, "form": form, "server": _hook_server_config()})


def _hook_server_config() -> dict[str, str]:
    """The server's side of the hooks, shown read-only next to the form."""
    try:
        transport = conf.controller_transport()
        return {"transport": transport, "scontrol": conf.scontrol_path(), "kubectl": conf.kubectl_path()}
    except conf.HookConfigError as exc:
        return {"error": str(exc)}


@role_required(VIEWER)
def schedule_list(request: HttpRequest) -> HttpResponse:
    page = Paginator(selectors.schedules(), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "health/schedules.html", {"page": page, "can_operate": has_role(request.user, OPERATOR)})


@role_required(OPERATOR)
def schedule_create(request: HttpRequest) -> HttpResponse:
    form = ScheduleForm(request.POST or None, initial={"plan": "quick", "cluster": request.GET.get("cluster")})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            schedule = services.schedule_create(
                name=data["name"],
                cluster=data["cluster"],
                plan=data["plan"],
                crontab=data["crontab"],
                node_set=data["node_set"],
                created_by=request.user,
            )
        except services.ScheduleError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Schedule “{schedule.name}” created ({schedule.crontab} UTC).")
            return redirect("health:schedules")
    return render(request, "health/schedule_form.html", {"form": form})


@role_required(OPERATOR)
def schedule_edit(request: HttpRequest, pk: int) -> HttpResponse:
    schedule = get_object_or_404(Schedule.objects.select_related("cluster", "plan"), pk=pk)
    initial = {
        "name": schedule.name,
        "cluster": schedule.cluster.name,
        "plan": schedule.plan.slug,
        "node_set": schedule.node_set,
        "crontab": schedule.crontab,
    }
    form = ScheduleForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            services.schedule_update(
                schedule=schedule,
                name=data["name"],
                cluster=data["cluster"],
                plan=data["plan"],
                crontab=data["crontab"],
                node_set=data["node_set"],
            )
        except services.ScheduleError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Schedule “{schedule.name}” saved ({schedule.crontab} UTC).")
            return redirect("health:schedules")
    return render(request, "health/schedule_form.html", {"form": form, "schedule": schedule})


@require_POST
@role_required(OPERATOR)
def schedule_toggle(request: HttpRequest, pk: int) -> HttpResponse:
    schedule = get_object_or_404(Schedule, pk=pk)
    services.schedule_set_enabled(schedule=schedule, enabled=request.POST.get("enabled") == "1")
    messages.success(request, f"Schedule “{schedule.name}” {'enabled' if schedule.enabled else 'disabled'}.")
    return redirect("health:schedules")


@require_POST
@role_required(OPERATOR)
def schedule_delete(request: HttpRequest, pk: int) -> HttpResponse:
    schedule = get_object_or_404(Schedule, pk=pk)
    services.schedule_delete(schedule=schedule)
    messages.success(request, f"Schedule “{schedule.name}” deleted.")
    return redirect("health:schedules")


DETAIL_VALUES = {"1": True, "true": True, "0": False, "false": False}  # ?detail= of /metrics


@login_not_required
@require_GET
def metrics(request: HttpRequest) -> HttpResponseBase:
    """Prometheus scrape endpoint. `Authorization: Bearer $KILN_METRICS_TOKEN`; no header: 401,
    a wrong token (or none configured, so the endpoint is off): 403. `?cluster=NAME`: that cluster
    only (404 when there is none of that name). `?detail=1` adds each node's per-GPU values, on a
    scrape of one cluster only (400 without `cluster`); `?detail=0` leaves them out where
    KILN_METRICS_DETAIL puts them in every scrape. Streamed."""
    from portal.health.metrics import CONTENT_TYPE, exposition_chunks

    token = conf.metrics_token()
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        response = HttpResponse("metrics need a bearer token\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="kiln-metrics"'
        return response
    if not token or not hmac.compare_digest(header[len("Bearer ") :].strip().encode(), token.encode()):
        return HttpResponse("invalid metrics token\n", status=403, content_type="text/plain")
    cluster = request.GET.get("cluster")
    asked = request.GET.get("detail")
    if asked is not None and asked not in DETAIL_VALUES:
        return HttpResponse("detail is 1 or 0\n", status=400, content_type="text/plain")
    detail = DETAIL_VALUES[asked] if asked is not None else conf.metrics_detail()
    if asked is not None and detail and cluster is None:
        return HttpResponse("detail=1 needs cluster=NAME\n", status=400, content_type="text/plain")
    if cluster is not None and not Cluster.objects.filter(name=cluster).exists():
        return HttpResponse("no such cluster\n", status=404, content_type="text/plain")
    return StreamingHttpResponse(exposition_chunks(cluster=cluster, detail=detail), content_type=CONTENT_TYPE)
