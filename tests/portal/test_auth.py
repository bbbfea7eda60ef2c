"""Who may see and do what: login everywhere, viewer reads, operator starts and cancels runs."""

from __future__ import annotations

import hashlib
import re
import zlib
from urllib.parse import quote

import pytest
from django.urls import reverse

from portal.inventory import urls as inventory_urls
from portal.runs import urls as runs_urls
from portal.runs.models import CheckResult, Run
from portal.urls import urlpatterns
from tests.portal.helpers import set_result

pytestmark = pytest.mark.django_db


@pytest.fixture
def objects(cluster, make_run):
    run = make_run(cluster)
    raw = b'{"gpus": []}\n'
    result = set_result(
        run,
        "n01",
        "gpu-inventory",
        "pass",
        "all within spec",
        stdout_raw=zlib.compress(raw),
        stdout_sha256=hashlib.sha256(raw).hexdigest(),
    )
    return {"cluster": cluster, "run": run, "result": result}


def page_urls(objects: dict) -> dict[str, str]:
    """One real URL per named Kiln page (admin and auth views excluded)."""
    cluster, run, result = objects["cluster"], objects["run"], objects["result"]
    return {
        "inventory:cluster_list": reverse("inventory:cluster_list"),
        "inventory:cluster_detail": reverse("inventory:cluster_detail", args=[cluster.name]),
        "inventory:node_import": reverse("inventory:node_import", args=[cluster.name]),
        "inventory:cluster_create": reverse("inventory:cluster_create"),
        "inventory:cluster_edit": reverse("inventory:cluster_edit", args=[cluster.name]),
        "inventory:node_add": reverse("inventory:node_add", args=[cluster.name]),
        "inventory:node_edit": reverse("inventory:node_edit", args=[cluster.name, "n01"]),
        "runs:run_start": reverse("runs:run_start", args=[cluster.name]),
        "runs:run_detail": reverse("runs:run_detail", args=[run.pk]),
        "runs:run_cancel": reverse("runs:run_cancel", args=[run.pk]),
        "runs:run_rerun": reverse("runs:run_rerun", args=[run.pk]),
        "runs:result_detail": reverse("runs:result_detail", args=[result.pk]),
        "runs:result_raw_output": reverse("runs:result_raw_output", args=[result.pk, "stdout"]),
        "runs:run_triage_csv": reverse("runs:run_triage_csv", args=[run.pk]),
        "runs:run_triage_rma": reverse("runs:run_triage_rma", args=[run.pk]),
        "plotly_js": reverse("plotly_js"),
    }


READ_PAGES = (
    "inventory:cluster_list",
    "inventory:cluster_detail",
    "runs:run_detail",
    "runs:result_detail",
    "runs:result_raw_output",
    "runs:run_triage_csv",
    "runs:run_triage_rma",
)


# The operators' inventory forms: a 403 for anyone without the operator role, GET or POST.
OPERATOR_FORMS = (
    "inventory:cluster_create",
    "inventory:cluster_edit",
    "inventory:node_add",
    "inventory:node_edit",
    "inventory:node_import",
)


@pytest.mark.parametrize("roles", [(), ("viewer",), ("approver",)])
def test_only_operators_open_or_post_the_inventory_forms(client, make_user, objects, roles) -> None:
    client.force_login(make_user("someone", *roles))
    urls = page_urls(objects)
    body = {"name": "new", "nodes": "x[1-2]", "add": "1", "rack": "R9", "hostname": "n01"}
    for name in OPERATOR_FORMS:
        assert client.get(urls[name]).status_code == 403, name
        assert client.post(urls[name], body).status_code == 403, name
    client.force_login(make_user("otto", "operator"))
    for name in OPERATOR_FORMS:
        assert client.get(urls[name]).status_code == 200, name
    assert objects["cluster"].nodes.count() == 4 and not objects["cluster"].nodes.filter(rack="R9").exists()


def test_it_covers_every_named_page_of_the_urlconf(objects) -> None:
    named = {p.name for p in urlpatterns if getattr(p, "name", None)} - {"login", "logout"}
    named |= {f"{m.app_name}:{p.name}" for m in (inventory_urls, runs_urls) for p in m.urlpatterns}
    named |= {f"inventory:{p.name}" for p in runs_urls.cluster_pages}  # served in the inventory namespace
    assert named == set(page_urls(objects))


@pytest.mark.parametrize("method", ["get", "post"])
def test_it_redirects_anonymous_users_to_login(client, objects, method) -> None:
    for name, url in page_urls(objects).items():
        response = getattr(client, method)(url)
        assert response.status_code == 302, name
        assert response["Location"] == f"/login/?next={quote(url)}", name
    assert Run.objects.count() == 1
    assert not CheckResult.objects.exclude(status__in=["queued", "pass"]).exists()


def test_it_forbids_users_without_a_role(client, make_user, objects) -> None:
    client.force_login(make_user("nobody"))
    urls = page_urls(objects)
    for name in (*READ_PAGES, "runs:run_start"):
        assert client.get(urls[name]).status_code == 403, name
    assert client.post(urls["runs:run_start"], {"plan": "quick", "node_set": "n01"}).status_code == 403
    assert client.post(urls["runs:run_cancel"]).status_code == 403
    assert Run.objects.count() == 1
    assert not CheckResult.objects.filter(status="cancelled").exists()


def test_it_lets_a_viewer_read_every_page(client, make_user, objects) -> None:
    client.force_login(make_user("vera", "viewer"))
    urls = page_urls(objects)
    for name in READ_PAGES:
        assert client.get(urls[name]).status_code == 200, name


def test_it_forbids_a_viewer_to_start_or_cancel_runs(client, make_user, objects) -> None:
    client.force_login(make_user("vera", "viewer"))
    urls = page_urls(objects)
    assert client.get(urls["runs:run_start"]).status_code == 403
    assert client.post(urls["runs:run_start"], {"plan": "quick", "node_set": "n01"}).status_code == 403
    assert client.post(urls["runs:run_cancel"]).status_code == 403
    assert Run.objects.count() == 1
    assert not CheckResult.objects.filter(status="cancelled").exists()


def test_it_hides_the_start_button_from_viewers(client, make_user, objects) -> None:
    url = reverse("inventory:cluster_detail", args=[objects["cluster"].name])
    start = reverse("runs:run_start", args=[objects["cluster"].name])
    client.force_login(make_user("vera", "viewer"))
    assert start not in client.get(url).content.decode()
    client.force_login(make_user("otto", "operator"))
    assert start in client.get(url).content.decode()


def test_it_lets_an_operator_start_a_run(
    quick_plan, client, make_user, cluster, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    from portal.runs import dispatch

    enqueued: list[dict] = []
    monkeypatch.setattr(dispatch, "enqueue_node", lambda **kwargs: enqueued.append(kwargs))
    client.force_login(make_user("otto", "operator"))
    assert client.get(reverse("runs:run_start", args=[cluster.name])).status_code == 200

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post(reverse("runs:run_start", args=[cluster.name]), {"plan": "unit", "node_set": "n[01-03]"})

    run = Run.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("runs:run_detail", args=[run.pk])
    assert run.requested_by.username == "otto"
    assert run.node_set == "n[01-03]"
    results = CheckResult.objects.filter(run=run)
    assert results.count() == 3 * 2  # nodes x quick plan items
    assert set(results.values_list("status", flat=True)) == {"queued"}
    assert len(callbacks) == 1
    node_ids = sorted(cluster.nodes.filter(hostname__in=["n01", "n02", "n03"]).values_list("pk", flat=True))
    assert sorted(e["node_id"] for e in enqueued) == node_ids
    assert {e["run_id"] for e in enqueued} == {run.pk}


def test_it_lets_an_operator_cancel_a_run(client, make_user, objects) -> None:
    client.force_login(make_user("otto", "operator"))
    run = objects["run"]
    response = client.post(reverse("runs:run_cancel", args=[run.pk]))
    assert response.status_code == 302
    assert response["Location"] == reverse("runs:run_detail", args=[run.pk])
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert CheckResult.objects.filter(run=run, status="cancelled").count() == 4 * 2 - 1


@pytest.mark.parametrize(
    ("node_set", "message"),
    [
        ("nope[1-2]", "not nodes of cluster c1: nope[1-2]"),
        ("n01,zz99", "not nodes of cluster c1: zz99"),
        ("n[01-", "node set"),
    ],
)
def test_it_shows_a_bad_node_set_on_the_form_and_starts_nothing(
    quick_plan, client, make_user, cluster, django_capture_on_commit_callbacks, node_set, message
) -> None:
    client.force_login(make_user("otto", "operator"))
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(reverse("runs:run_start", args=[cluster.name]), {"plan": "unit", "node_set": node_set})
    assert response.status_code == 200
    assert message in response.content.decode()
    assert response.context["form"].non_field_errors()
    assert Run.objects.count() == 0
    assert CheckResult.objects.count() == 0
    assert callbacks == []


def _walk(patterns, prefix=""):
    from django.urls import URLPattern, URLResolver

    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p


def test_every_view_outside_the_allow_list_requires_a_login() -> None:
    """LoginRequiredMiddleware guards every view unless it opts out; only these may."""
    from django.urls import get_resolver

    # /metrics has its own bearer token (portal/health/views.py); the public verify page is for anyone.
    allowed = {"login", "metrics", "public_verify"}
    routes = list(_walk(get_resolver().url_patterns))
    opted_out = {
        p.name or route
        for route, p in routes
        if not route.lstrip("^").startswith(("admin/", "api/")) and getattr(p.callback, "login_required", True) is False
    }
    assert opted_out == allowed
    # The REST API answers 401/403 in JSON itself (tests/api); its two documentation pages are pages.
    api = {
        route: getattr(p.callback, "login_required", True)
        for route, p in routes
        if route.lstrip("^").startswith("api/")
    }
    assert api.pop("api/v1/docs/") is True and api.pop("api/v1/redoc/") is True
    assert api and not any(api.values()), api


_GROUP = re.compile(r"\(\?P<\w+>([^)]*)\)")
_CONVERTER = re.compile(r"<(?:(\w+):)?\w+>")


def _sample(route: str) -> str:
    """A concrete path for a route of the URL resolver: 1 for a number, the first of alternatives,
    else a word."""

    def group(match: re.Match[str]) -> str:
        body = match.group(1)
        if "\\d" in body or "0-9" in body:
            return "1"
        return re.sub(r"[^\w.-]", "", body.split("|")[0]) or "x"

    path = _GROUP.sub(group, route.replace("^", "").replace("$", ""))
    path = _CONVERTER.sub(lambda m: "1" if m.group(1) == "int" else "x", path)
    path = path.replace(".*", "x").replace("\\", "")
    return "/" + re.sub(r"[()?+*]", "", path)


def test_an_anonymous_client_reaches_nothing_but_the_login_and_the_public_verify_page(client, db) -> None:
    """Every route of the resolver, GET and POST, without a session: a redirect to a login page, or
    401/403/404/405. Only the login pages and the public verify page answer 200."""
    from django.urls import get_resolver, resolve

    open_pages = {"/login/", "/admin/login/", "/verify/"}
    seen = set()
    for route, pattern in _walk(get_resolver().url_patterns):
        url = _sample(route)
        assert resolve(url).url_name == pattern.name, (route, url)  # the sample reaches that very view
        if url in seen or url in open_pages:
            continue
        seen.add(url)
        for method in ("get", "post"):
            response = getattr(client, method)(url)
            if response.status_code in (301, 302):
                assert response["Location"].startswith(("/login/?next=", "/admin/login/?next=")), (url, method)
            else:
                assert response.status_code in (401, 403, 404, 405), (url, method, response.status_code)
    assert len(seen) > 100, "the walk covers the whole URL conf"
    assert client.get("/verify/").status_code == 200
    assert client.get("/login/").status_code == 200
