"""API tokens: shown once, stored hashed, revoked or expired ones refused, the page and the command."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from portal.api import services
from portal.api.models import ApiToken


def test_it_stores_only_a_hash_of_the_secret(people) -> None:
    token, secret = services.token_create(user=people["viewer"].user, name="ci")
    stored = ApiToken.objects.get(pk=token.pk)
    assert stored.secret_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    row = {f.attname: str(getattr(stored, f.attname)) for f in ApiToken._meta.fields}
    assert all(secret not in value for value in row.values())
    assert secret.startswith(f"kiln_{token.prefix}_") and len(secret) > 50


def test_it_authenticates_with_token_or_bearer(people, api_client, db) -> None:
    secret = people["viewer"].secret
    for scheme in ("Token", "Bearer", "token"):
        assert api_client(secret, scheme).get("/api/v1/clusters/").status_code == 200
    token = ApiToken.objects.get(user=people["viewer"].user)
    assert token.last_used_at is not None


@pytest.mark.parametrize("header", ["Token", "Token a b", "Token nope", "Bearer kiln_00000000_x"])
def test_it_refuses_bad_tokens_with_401_json(api_client, db, header) -> None:
    from django.test import Client

    response = Client(SERVER_NAME="localhost", HTTP_AUTHORIZATION=header).get("/api/v1/clusters/")
    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    assert response.json()["detail"]


def test_it_refuses_a_revoked_token(people, api_client) -> None:
    person = people["operator"]
    token = ApiToken.objects.get(user=person.user)
    assert api_client(person.secret).get("/api/v1/runs/").status_code == 200
    services.token_revoke(user=person.user, prefix=token.prefix)
    response = api_client(person.secret).get("/api/v1/runs/")
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]
    with pytest.raises(services.TokenError, match="already"):
        services.token_revoke(user=person.user, prefix=token.prefix)


def test_it_refuses_an_expired_token(people, api_client) -> None:
    user = people["viewer"].user
    token, secret = services.token_create(user=user, name="short", expires_at=datetime.now(UTC) + timedelta(hours=1))
    assert api_client(secret).get("/api/v1/plans/").status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=datetime.now(UTC) - timedelta(seconds=1))
    assert api_client(secret).get("/api/v1/plans/").status_code == 401


def test_it_refuses_a_token_of_an_inactive_user(people, api_client) -> None:
    person = people["viewer"]
    person.user.is_active = False
    person.user.save()
    assert api_client(person.secret).get("/api/v1/plans/").status_code == 401


def test_it_lists_and_revokes_own_tokens_through_the_api(people, api_client) -> None:
    client = api_client(people["viewer"].secret)
    listed = client.get("/api/v1/tokens/").json()
    assert listed["count"] == 1 and "secret" not in listed["results"][0]
    other = ApiToken.objects.get(user=people["operator"].user)
    assert client.delete(f"/api/v1/tokens/{other.pk}/").status_code == 404  # not theirs
    mine = listed["results"][0]["id"]
    assert client.delete(f"/api/v1/tokens/{mine}/").status_code == 204
    assert client.get("/api/v1/tokens/").status_code == 401  # that was the token in use


def test_a_token_cannot_mint_tokens_but_a_session_can(people, api_client) -> None:
    response = api_client(people["viewer"].secret).post(
        "/api/v1/tokens/", {"name": "more"}, content_type="application/json"
    )
    assert response.status_code == 403
    from django.test import Client

    browser = Client(SERVER_NAME="localhost", enforce_csrf_checks=True)
    browser.force_login(people["viewer"].user)
    assert browser.post("/api/v1/tokens/", {"name": "x"}, content_type="application/json").status_code == 403  # CSRF
    browser = Client(SERVER_NAME="localhost")
    browser.force_login(people["viewer"].user)
    created = browser.post("/api/v1/tokens/", {"name": "from the browser"}, content_type="application/json").json()
    assert created["secret"].startswith("kiln_")
    assert api_client(created["secret"]).get("/api/v1/plans/").status_code == 200
    listed = browser.get("/api/v1/tokens/").json()["results"]
    assert all("secret" not in row for row in listed)


def test_the_token_endpoints_are_throttled(people, api_client, settings) -> None:
    client = api_client(people["viewer"].secret)
    codes = [client.get("/api/v1/tokens/").status_code for _ in range(31)]
    assert codes[:30] == [200] * 30
    assert codes[30] == 429


def test_the_page_shows_a_new_secret_once(people) -> None:
    from django.test import Client

    browser = Client(SERVER_NAME="localhost")
    assert browser.get("/account/tokens/").status_code == 302  # login first
    browser.force_login(people["viewer"].user)
    nonce = re.search(r'name="form_nonce" value="([^"]+)"', browser.get("/account/tokens/").content.decode())[1]
    page = browser.post("/account/tokens/", {"name": "laptop", "form_nonce": nonce})
    assert page.status_code == 200 and page["Cache-Control"] == "no-store"
    token = ApiToken.objects.get(user=people["viewer"].user, name="laptop")
    secret = page.context["created"][1]
    assert secret.encode() in page.content
    again = browser.get("/account/tokens/")
    assert token.prefix.encode() in again.content and secret.encode() not in again.content
    revoked = browser.post(f"/account/tokens/{token.prefix}/revoke/", follow=True)
    assert b"revoked" in revoked.content
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None


def test_a_reload_that_sends_the_form_again_makes_no_second_token(people) -> None:
    from django.test import Client

    browser = Client(SERVER_NAME="localhost")
    browser.force_login(people["viewer"].user)
    before = list(ApiToken.objects.values_list("pk", flat=True))  # the fixture's own tokens
    form = browser.get("/account/tokens/").content.decode()
    nonce = re.search(r'name="form_nonce" value="([^"]+)"', form)[1]
    first = browser.post("/account/tokens/", {"name": "laptop", "form_nonce": nonce})
    secret = first.context["created"][1]
    again = browser.post("/account/tokens/", {"name": "laptop", "form_nonce": nonce})  # the browser's reload
    assert again.status_code == 200 and again.context["created"] is None and secret.encode() not in again.content
    mine = ApiToken.objects.filter(user=people["viewer"].user).exclude(pk__in=before)
    (token,) = mine  # one token, not two
    assert f"it made token {token.prefix} (laptop)" in again.content.decode()
    # The page it answers with carries a fresh form: the next submission makes a token.
    fresh = re.search(r'name="form_nonce" value="([^"]+)"', again.content.decode())[1]
    assert fresh != nonce
    browser.post("/account/tokens/", {"name": "desktop", "form_nonce": fresh})
    # Without the form's one-time value (a hand-made POST) nothing is made.
    assert browser.post("/account/tokens/", {"name": "script"}).context["created"] is None
    assert sorted(mine.values_list("name", flat=True)) == ["desktop", "laptop"]


def test_the_page_is_in_the_nav(people) -> None:
    from django.test import Client

    browser = Client(SERVER_NAME="localhost")
    browser.force_login(people["viewer"].user)
    assert b'href="/account/tokens/"' in browser.get("/clusters/").content


def test_the_command_creates_lists_and_revokes(people) -> None:
    out, err = StringIO(), StringIO()
    call_command("kiln_token", "operator", "--name", "nightly", stdout=out, stderr=err)
    secret = out.getvalue().strip()
    token = ApiToken.objects.get(name="nightly")
    assert token.secret_sha256 == services.secret_hash(secret) and "shown once" in err.getvalue()
    listing = StringIO()
    call_command("kiln_token", "operator", "--list", stdout=listing)
    assert token.prefix in listing.getvalue() and secret not in listing.getvalue()
    call_command("kiln_token", "operator", "--revoke", token.prefix, stdout=StringIO())
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    with pytest.raises(CommandError, match="no user"):
        call_command("kiln_token", "ghost")
    with pytest.raises(CommandError, match="no token"):
        call_command("kiln_token", "operator", "--revoke", "ffffffff")
