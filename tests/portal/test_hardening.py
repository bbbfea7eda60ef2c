"""Web hardening (docs/security.md): unreadable input is a 400 on every URL for every role, logins are
throttled, KILN_HTTPS makes `check --deploy` clean, and every page carries a Content-Security-Policy
that forbids inline script."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse

from portal import middleware
from tests.conftest import REPO

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "viewer", "operator", "approver", "superuser")
SAMPLES = {"int": "1", "str": "x", "path": "x", "slug": "x", "uuid": "12345678-1234-5678-1234-567812345678"}


def _walk(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p


def _sample_path(route: str) -> str:
    """A concrete path for a route: converters get a sample value, regex groups their first choice."""
    path = re.sub(r"\(\?P<\w+>([^|)]*)[^)]*\)", lambda m: m.group(1) or "x", route)  # (?P<app>a|b) -> a
    path = re.sub(r"<(?:(\w+):)?\w+>", lambda m: SAMPLES[m.group(1) or "str"], path)
    path = path.replace(".*", "x").replace(".+", "x").replace("^", "").replace("$", "").replace("\\", "")
    return "/" + path


def every_url() -> dict[str, str]:
    """One concrete URL per URL pattern of the project, admin included; each resolves to its pattern."""
    urls = {}
    for route, pattern in _walk(get_resolver().url_patterns):
        url = _sample_path(route)
        assert resolve(url).func == pattern.callback, (route, url)
        urls[pattern.name or route] = url
    return urls


def test_it_builds_a_url_for_every_pattern_of_the_urlconf() -> None:
    urls = every_url()
    assert {"cluster_detail", "result_search", "metrics", "login", "admin:index"} <= set(urls) | {
        f"admin:{n}" for n in urls
    }
    assert len(urls) >= 60  # the portal's pages and the admin's


@pytest.fixture
def clients(make_user) -> dict[str, Client]:
    out = {"anonymous": Client(raise_request_exception=False)}
    for role in ROLES[1:]:
        client = Client(raise_request_exception=False)
        user = make_user(f"u-{role}", *([] if role == "superuser" else [role]), superuser=role == "superuser")
        if role == "superuser":
            User.objects.filter(pk=user.pk).update(is_staff=True)
        client.force_login(user)
        out[role] = client
    return out


def _refused(response) -> bool:
    if response.status_code != 400:
        return False
    if response.get("Content-Type") == "application/json":  # the REST API's errors (portal/api)
        return response.json()["detail"].startswith("Bad request: ")
    return response.content.startswith(b"Bad request: ")


BAD_IN_PATH = ["%00", "%01", "%1B", "%7F", "%FF", "%C0%80", "%ED%A0%80"]  # C0, DEL, not UTF-8, surrogate
BAD_IN_QUERY = ["a%00b", "%0C", "%FF", "%ED%A0%80", "%C3"]


def _bad_requests(url: str, *, every_kind: bool) -> list[tuple[str, str, str, object, str | None]]:
    """(what, method, url, data, content type) of requests holding unreadable input for `url`."""
    head, slash = (url[:-1], "/") if url.endswith("/") else (url, "")
    out: list[tuple[str, str, str, object, str | None]] = [
        ("GET path NUL", "GET", f"{head}%00{slash}", None, None),
        ("GET query NUL", "GET", f"{url}?page=1&node=a%00b", None, None),
        ("POST field NUL", "POST", url, {"node_set": "n01\x00", "plan": "quick"}, None),
    ]
    if every_kind:
        out += [(f"GET path {b}", "GET", f"{head}{b}{slash}", None, None) for b in BAD_IN_PATH]
        out += [(f"GET query {b}", "GET", f"{url}?q={b}", None, None) for b in BAD_IN_QUERY]
        out.append(("POST name NUL", "POST", url, {"n\x00": "1"}, None))
        out.append(("POST ESC", "POST", url, {"reason": "x\x1b[2J"}, None))
        # An encoded lone surrogate in a form body: not UTF-8.
        out.append(("POST bytes", "POST", url, b"reason=%ED%A0%80", "application/x-www-form-urlencoded"))
    return out


def test_it_answers_400_to_unreadable_input_on_every_url_for_every_role(clients) -> None:
    """The finding: a NUL in a URL or parameter gave a 500 (PostgreSQL refuses NUL in a query)."""
    failures = []
    for name, url in every_url().items():
        for role, client in clients.items():
            for what, method, target, data, content_type in _bad_requests(url, every_kind=role == "viewer"):
                if method == "GET":
                    response = client.get(target)
                elif content_type:
                    response = client.generic(method, target, data, content_type)
                else:
                    response = client.post(target, data)
                if not (_refused(response) or _upload_refused_unread(name, role, method, response)):
                    failures.append(f"{name} {role} {what}: {response.status_code}")
    assert not failures, failures


# An anonymous upload to these is answered (the login page, 401) before its body is read at all
# (tests/certificates/test_verify_bounds.py): nothing in it can reach the database.
UNREAD_ANONYMOUS_UPLOADS = {"certificate_verify": 302, "certificate-verify": 401, "certificate-verify-hardware": 401}


def _upload_refused_unread(name: str, role: str, method: str, response) -> bool:
    return role == "anonymous" and method == "POST" and UNREAD_ANONYMOUS_UPLOADS.get(name) == response.status_code


def test_it_says_what_was_refused(clients) -> None:
    response = clients["viewer"].get("/clusters/a%00b/")
    assert response.content.decode() == (
        "Bad request: the URL path holds the control character NUL, which Kiln does not accept.\n"
    )
    response = clients["viewer"].get("/results/?node=gpu%1B")
    assert "the query parameter 'node' holds the control character 0x1B" in response.content.decode()


def test_it_reproduced_the_500_without_the_middleware(clients, cluster, settings) -> None:
    """Without RejectUnreadableInputMiddleware a NUL in a name reaches the database: PostgreSQL refuses
    it (500); SQLite finds nothing (404). With it: 400 on both."""
    url = f"/clusters/{cluster.name}%00/"
    assert _refused(clients["viewer"].get(url))
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if m != "portal.middleware.RejectUnreadableInputMiddleware"]
    from django.db import connection

    expected = 500 if connection.vendor == "postgresql" else 404
    assert Client(raise_request_exception=False).get(url).status_code in (302, expected)  # anonymous: login
    viewer = Client(raise_request_exception=False)
    viewer.force_login(User.objects.get(username="u-viewer"))
    assert viewer.get(url).status_code == expected


def test_it_accepts_ordinary_text_tabs_and_line_breaks(clients, cluster) -> None:
    viewer = clients["viewer"]
    assert viewer.get("/clusters/%C3%B1%E6%97%A5/").status_code == 404  # UTF-8 names: just not found
    assert viewer.get(reverse("history:result_search"), {"check": "ünïcode ✓"}).status_code == 200
    operator = clients["operator"]
    response = operator.post(reverse("runs:run_start", args=[cluster.name]), {"plan": "quick", "node_set": "n01\r\n\t"})
    assert response.status_code in (200, 302) and not _refused(response)


# --- login throttling (django-axes) ---------------------------------------------------------------


def _login(client: Client, username: str, password: str, address: str = "192.0.2.10"):
    return client.post(reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address)


def test_it_locks_a_username_and_address_out_after_10_failures(make_user, settings) -> None:
    """The finding: 40 wrong passwords in 8 s were all accepted for checking."""
    assert settings.AXES_FAILURE_LIMIT == 10 and settings.AXES_COOLOFF_TIME == timedelta(minutes=30)
    make_user("olga", "operator")
    client = Client()
    for _ in range(9):
        assert _login(client, "olga", "wrong").status_code == 200  # the form again, with its error
    locked = _login(client, "olga", "wrong")
    assert locked.status_code == 429
    body = locked.content.decode()
    assert "Too many failed logins" in body and "olga" in body and "axes_reset_username" in body
    assert "0:30:00" in body
    # Even the right password is refused from there now...
    assert _login(client, "olga", "pw-olga").status_code == 429
    # ...but not from another address, nor for another user from the same address.
    assert _login(Client(), "olga", "pw-olga", address="192.0.2.99").status_code == 302
    make_user("ivan", "viewer")
    assert _login(Client(), "ivan", "pw-ivan").status_code == 302


def test_it_forgets_failures_after_a_success(make_user) -> None:
    make_user("olga", "operator")
    client = Client()
    for _ in range(9):
        _login(client, "olga", "wrong")
    assert _login(client, "olga", "pw-olga").status_code == 302
    for _ in range(9):
        assert _login(Client(), "olga", "wrong").status_code == 200


def test_it_lets_the_user_in_again_after_the_cool_off(make_user) -> None:
    from axes.models import AccessAttempt

    make_user("olga", "operator")
    for _ in range(10):
        _login(Client(), "olga", "wrong")
    assert _login(Client(), "olga", "pw-olga").status_code == 429
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - timedelta(minutes=31))
    assert _login(Client(), "olga", "pw-olga").status_code == 302


def test_it_unlocks_with_axes_reset_username(make_user) -> None:
    make_user("olga", "operator")
    for _ in range(10):
        _login(Client(), "olga", "wrong")
    assert _login(Client(), "olga", "pw-olga").status_code == 429
    call_command("axes_reset_username", "olga")
    assert _login(Client(), "olga", "pw-olga").status_code == 302


def test_it_throttles_the_admin_login_too(make_user) -> None:
    make_user("root2", superuser=True)
    User.objects.filter(username="root2").update(is_staff=True)
    url = reverse("admin:login")
    for _ in range(10):
        Client().post(url, {"username": "root2", "password": "wrong"}, REMOTE_ADDR="192.0.2.10")
    assert Client().post(url, {"username": "root2", "password": "pw-root2"}, REMOTE_ADDR="192.0.2.10").status_code == (
        429
    )


def test_it_reads_the_client_address_behind_the_configured_number_of_proxies(rf, settings) -> None:
    request = rf.get("/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="6.6.6.6, 198.51.100.7, 10.0.0.1")
    settings.KILN_PROXY_COUNT = 0
    assert middleware.client_ip(request) == "10.0.0.2"  # no proxy: the header is the client's to write
    settings.KILN_PROXY_COUNT = 1
    assert middleware.client_ip(request) == "10.0.0.1"
    settings.KILN_PROXY_COUNT = 2
    assert middleware.client_ip(request) == "198.51.100.7"  # never the client-written 6.6.6.6 at the left
    settings.KILN_PROXY_COUNT = 5
    assert middleware.client_ip(request) == "10.0.0.2"


# --- KILN_HTTPS ---------------------------------------------------------------------------------


def _manage(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "DJANGO_"))}
    base.update({"KILN_DATA_DIR": str(tmp_path), "KILN_ALLOWED_HOSTS": "kiln.example.org", **env})
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=base, capture_output=True, text=True, timeout=120
    )


PRODUCTION = {"KILN_DEBUG": "0", "KILN_SECRET_KEY": secrets.token_urlsafe(50)}


def test_it_passes_check_deploy_with_kiln_https(tmp_path) -> None:
    result = _manage(tmp_path, {**PRODUCTION, "KILN_HTTPS": "1"}, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_it_reproduced_the_four_deploy_warnings_without_it(tmp_path) -> None:
    result = _manage(tmp_path, PRODUCTION, "check", "--deploy")
    found = set(re.findall(r"security\.W\d+", result.stdout + result.stderr))
    assert found == {"security.W004", "security.W008", "security.W012", "security.W016"}


def _settings_under(tmp_path: Path, env: dict[str, str]) -> dict:
    code = (
        "import json, django; from django.conf import settings; django.setup(); print(json.dumps({k: getattr("
        "settings, k, None) for k in ('SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SECURE_SSL_REDIRECT',"
        " 'SECURE_HSTS_SECONDS', 'SECURE_HSTS_INCLUDE_SUBDOMAINS', 'SECURE_HSTS_PRELOAD', 'SECURE_PROXY_SSL_HEADER',"
        " 'KILN_CSP')}))"
    )
    result = _manage(tmp_path, env, "shell", "-c", code)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_it_turns_on_secure_cookies_hsts_and_the_redirect_with_kiln_https(tmp_path) -> None:
    plain = _settings_under(tmp_path, {})
    assert not plain["SESSION_COOKIE_SECURE"] and not plain["SECURE_SSL_REDIRECT"] and not plain["SECURE_HSTS_SECONDS"]
    https = _settings_under(tmp_path, {"KILN_HTTPS": "1"})
    assert https["SESSION_COOKIE_SECURE"] and https["CSRF_COOKIE_SECURE"] and https["SECURE_SSL_REDIRECT"]
    assert https["SECURE_HSTS_SECONDS"] == 31536000 and https["SECURE_HSTS_INCLUDE_SUBDOMAINS"]
    assert not https["SECURE_HSTS_PRELOAD"]
    assert https["SECURE_PROXY_SSL_HEADER"] is None  # X-Forwarded-Proto is not trusted unless asked
    assert "upgrade-insecure-requests" in https["KILN_CSP"]
    proxied = _settings_under(tmp_path, {"KILN_HTTPS": "1", "KILN_TRUST_PROXY_SSL_HEADER": "1"})
    assert proxied["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]


@pytest.fixture
def https_behind_proxy(settings) -> None:
    """The settings KILN_HTTPS=1 KILN_TRUST_PROXY_SSL_HEADER=1 give (checked above in a subprocess)."""
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.KILN_METRICS_TOKEN = "s3cret-token"


def test_it_serves_metrics_and_pages_behind_a_tls_terminating_proxy(https_behind_proxy, make_user) -> None:
    proxied = {"HTTP_X_FORWARDED_PROTO": "https"}
    metrics = Client().get(reverse("health:metrics"), HTTP_AUTHORIZATION="Bearer s3cret-token", **proxied)
    assert metrics.status_code == 200 and metrics["Strict-Transport-Security"] == (
        "max-age=31536000; includeSubDomains"
    )
    make_user("vera", "viewer")
    client = Client()
    login = client.post(reverse("login"), {"username": "vera", "password": "pw-vera"}, **proxied)
    assert login.status_code == 302 and login.cookies["sessionid"]["secure"]
    assert client.get(reverse("health:overview"), **proxied).status_code == 200
    # Plain HTTP (no proxy header) is redirected to HTTPS, /metrics included.
    plain = Client().get(reverse("health:metrics"), HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert plain.status_code == 301 and plain["Location"] == "https://testserver/metrics"


# --- Content-Security-Policy ------------------------------------------------------------------------


def test_it_sends_a_csp_without_inline_script_on_every_page(clients, cluster) -> None:
    for url in (
        "/login/",
        reverse("inventory:cluster_list"),
        reverse("inventory:cluster_detail", args=[cluster.name]),
        "/admin/",
    ):
        response = clients["superuser"].get(url)
        assert response.status_code == 200, url
        policy = dict(d.strip().split(" ", 1) for d in response["Content-Security-Policy"].split(";"))
        assert policy["default-src"] == "'self'" and policy["script-src"] == "'self'", policy
        assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
        assert "unsafe-eval" not in response["Content-Security-Policy"]


INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I)
EVENT_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.I)


def test_it_has_no_inline_script_in_any_template() -> None:
    """The CSP's script-src 'self' would block them. The certificate PDF template is rendered by
    WeasyPrint, never by a browser, and runs no script."""
    offenders = []
    for path in sorted((REPO / "portal").glob("**/templates/**/*.html")):
        text = path.read_text()
        for pattern in (INLINE_SCRIPT, EVENT_HANDLER, re.compile(r"javascript:", re.I)):
            offenders += [f"{path.relative_to(REPO)}: {m.group()[:60]}" for m in pattern.finditer(text)]
    assert not offenders, offenders


def test_it_has_no_multi_line_comment_tag_in_any_template() -> None:
    """Django's {# #} ends at the line's end: a multi-line one is printed on the page as text."""
    offenders = [
        f"{path.relative_to(REPO)}:{n}"
        for path in sorted((REPO / "portal").glob("**/templates/**/*.html"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "{#" in line and "#}" not in line.split("{#", 1)[1]
    ]
    assert not offenders, offenders
