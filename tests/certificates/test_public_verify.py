"""The public verify page: anyone (no account) verifies a certificate and learns its status and
identity, nothing else of the portal; bounded like the logged-in page (size, slots) and per client
address (uploads per hour)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from django.test import Client
from django.urls import reverse

from portal.certificates import keys, services, slots, verification
from portal.certificates.models import PublicVerifyCount
from portal.certificates.seal import NOT_A_CERTIFICATE, REVOKED, TAMPERED, UNKNOWN_KEY, VALID, Verdict
from tests.certificates.test_verify_bounds import MiB, _multipart, _wsgi, held_elsewhere
from tests.conftest import REPO
from tests.portal.test_settings_layer import _env

PUBLIC = "/verify/"
FIELDS = {
    "status", "meaning", "number", "cluster", "issued_at", "certificate_verdict", "revoked_at", "revocation_reason",
}  # fmt: skip


def _upload(data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile("certificate.pdf", data, content_type="application/pdf")


def _ask(data: bytes, **extra: str) -> dict:
    """One anonymous JSON verification (a client of its own: no cookie, no session)."""
    response = Client().post(PUBLIC, {"pdf": _upload(data)}, HTTP_ACCEPT="application/json", **extra)
    assert response.status_code == 200, response.content
    answer = response.json()
    assert set(answer) == FIELDS
    return answer


def _flipped(data: bytes) -> bytes:
    changed = bytearray(data)
    changed[len(changed) // 2] ^= 0xFF
    return bytes(changed)


def _no_user_in(text: str, users: dict) -> None:
    for user in users.values():
        assert not re.search(rf"\b{re.escape(user.get_username())}\b", text), user.get_username()


def test_the_path_is_the_one_the_pdf_prints():
    assert reverse("certificates:public_verify") == PUBLIC


def test_an_anonymous_client_verifies_a_valid_certificate(issued, users):
    answer = _ask(bytes(issued.pdf))
    assert answer["status"] == VALID
    assert answer["number"] == issued.number and answer["cluster"] == issued.campaign.cluster.name
    assert answer["certificate_verdict"] == "PASS WITH WAIVERS"
    assert datetime.fromisoformat(answer["issued_at"]) == issued.issued_at
    assert answer["revoked_at"] == answer["revocation_reason"] == ""
    _no_user_in(json.dumps(answer), users)

    page = Client().post(PUBLIC, {"pdf": _upload(bytes(issued.pdf))})
    assert page.status_code == 200
    text = page.content.decode()
    assert 'id="verify-status">VALID<' in text and issued.number in text
    assert keys.cert_fingerprint(keys.site_ca()) in text


def test_an_anonymous_client_is_told_a_tampered_certificate_and_nothing_it_claims(issued):
    answer = _ask(_flipped(bytes(issued.pdf)))
    assert answer["status"] == TAMPERED
    assert {k: v for k, v in answer.items() if v} == {"status": TAMPERED, "meaning": answer["meaning"]}
    text = Client().post(PUBLIC, {"pdf": _upload(_flipped(bytes(issued.pdf)))}).content.decode()
    assert 'id="verify-status">TAMPERED<' in text and issued.number not in text


def test_an_anonymous_client_is_told_another_sites_certificate_is_unknown_key(issued, settings, tmp_path):
    data = bytes(issued.pdf)
    settings.KILN_KEY_DIR = str(tmp_path / "other-site")
    keys.keyring_init(site="Other site")
    answer = _ask(data)
    assert answer["status"] == UNKNOWN_KEY and answer["number"] == ""
    assert "not by a key this site trusts" in answer["meaning"]


def test_an_anonymous_client_sees_a_revocation_with_its_reason_but_not_who(issued, users):
    services.certificate_revoke(certificate=issued, reason="issued against the wrong plan", user=users["customer"])
    answer = _ask(bytes(issued.pdf))
    assert answer["status"] == REVOKED and answer["number"] == issued.number
    assert answer["revocation_reason"] == "issued against the wrong plan"
    assert datetime.fromisoformat(answer["revoked_at"]) == issued.revocation.revoked_at
    _no_user_in(json.dumps(answer), users)
    text = Client().post(PUBLIC, {"pdf": _upload(bytes(issued.pdf))}).content.decode()
    assert 'id="verify-status">REVOKED<' in text and "issued against the wrong plan" in text


def test_an_anonymous_client_is_told_a_file_is_not_a_certificate(db):
    assert _ask(b"%PDF-1.4 nothing")["status"] == NOT_A_CERTIFICATE


def test_the_answer_is_the_same_service_as_the_logged_in_page(db, monkeypatch):
    """The public page calls verification.certificate_verify (the sandboxed child), nothing of its own."""
    calls: list[bytes] = []

    def fake(*, data: bytes, digests: bool = False) -> Verdict:
        calls.append(data)
        return Verdict(NOT_A_CERTIFICATE, "fake detail with internal words")

    monkeypatch.setattr(verification, "certificate_verify", fake)
    response = Client().post(PUBLIC, {"pdf": _upload(b"abc")}, HTTP_ACCEPT="application/json")
    assert calls == [b"abc"] and "internal words" not in response.content.decode()


def test_a_post_without_a_file_is_a_clear_400(db):
    response = Client().post(PUBLIC, {}, HTTP_ACCEPT="application/json")
    assert response.status_code == 400 and "pdf" in response.json()["detail"]
    page = Client().post(PUBLIC, {"other": "x"})
    assert page.status_code == 400 and 'id="verify-error"' in page.content.decode()
    assert Client().put(PUBLIC).status_code == 405


def test_the_page_needs_no_csrf_token_and_links_nowhere_private(db):
    client = Client(enforce_csrf_checks=True)
    page = client.get(PUBLIC)
    assert page.status_code == 200
    text = page.content.decode()
    hrefs = set(re.findall(r'href="([^"]+)"', text))
    assert all(h.startswith("/static/") for h in hrefs), hrefs  # stylesheet and icon only
    assert "csrfmiddlewaretoken" not in text and "Log out" not in text
    response = client.post(PUBLIC, {"pdf": _upload(b"%PDF-1.4 x")}, HTTP_ACCEPT="application/json")
    assert response.status_code == 200 and response.json()["status"] == NOT_A_CERTIFICATE


def test_a_logged_in_users_header_is_not_shown_either(client, users):
    client.force_login(users["operator"])
    text = client.get(PUBLIC).content.decode()
    assert users["operator"].get_username() not in text and "Campaigns" not in text


@pytest.fixture
def fake_verifier(monkeypatch) -> list[bytes]:
    calls: list[bytes] = []

    def fake(*, data: bytes, digests: bool = False) -> Verdict:
        calls.append(data)
        return Verdict(NOT_A_CERTIFICATE, "fake")

    monkeypatch.setattr(verification, "certificate_verify", fake)
    return calls


def test_each_address_gets_its_uploads_per_hour_then_429(db, settings, fake_verifier):
    settings.KILN_VERIFY_PUBLIC_PER_HOUR = 2
    for _ in range(2):
        assert Client().post(PUBLIC, {"pdf": _upload(b"x")}, REMOTE_ADDR="192.0.2.7").status_code == 200
    refused = Client().post(PUBLIC, {"pdf": _upload(b"x")}, REMOTE_ADDR="192.0.2.7", HTTP_ACCEPT="application/json")
    assert refused.status_code == 429 and 0 < int(refused["Retry-After"]) <= 3600
    assert "2 certificates this hour" in refused.json()["detail"]
    page = Client().post(PUBLIC, {"pdf": _upload(b"x")}, REMOTE_ADDR="192.0.2.7")
    assert page.status_code == 429 and 'id="verify-refusal"' in page.content.decode()
    assert keys.cert_fingerprint(keys.site_ca()) in page.content.decode()
    assert len(fake_verifier) == 2, "a refused upload is never verified"
    assert Client().post(PUBLIC, {"pdf": _upload(b"x")}, REMOTE_ADDR="192.0.2.8").status_code == 200
    assert Client().get(PUBLIC, REMOTE_ADDR="192.0.2.7").status_code == 200, "reading the page is not counted"
    stored = list(PublicVerifyCount.objects.values_list("client", flat=True))
    assert len(stored) == 2 and not any("192.0.2" in c for c in stored), "no visitor address is stored"


def test_behind_a_proxy_the_address_is_the_one_the_proxy_saw(db, settings, fake_verifier):
    settings.KILN_VERIFY_PUBLIC_PER_HOUR, settings.KILN_PROXY_COUNT = 1, 1

    def post(forwarded: str) -> int:
        return (
            Client()
            .post(PUBLIC, {"pdf": _upload(b"x")}, REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR=forwarded)
            .status_code
        )

    assert post("198.51.100.1") == 200
    assert post("spoofed, 198.51.100.1") == 429, "what the client wrote left of the proxy's entry is ignored"
    assert post("198.51.100.2") == 200


def test_the_window_is_an_hour_and_old_hours_are_forgotten(db, settings):
    settings.KILN_VERIFY_PUBLIC_PER_HOUR = 1
    at = datetime(2026, 5, 1, 10, 59, 30, tzinfo=UTC)
    assert services.public_verify_admit(address="a", now=at) == 0
    assert services.public_verify_admit(address="a", now=at) == 30
    assert services.public_verify_admit(address="b", now=at) == 0
    later = at + timedelta(seconds=31)
    assert services.public_verify_admit(address="a", now=later) == 0
    assert PublicVerifyCount.objects.count() == 1, "the past hour's rows are deleted"
    settings.KILN_VERIFY_PUBLIC_PER_HOUR = 0
    assert services.public_verify_admit(address="c", now=later) > 0


@contextmanager
def public_slot_held() -> Iterator[None]:
    """A visitor's verification in progress in another thread (its own database connection)."""
    ready, release, failed = threading.Event(), threading.Event(), []

    def hold() -> None:
        try:
            with slots.public_slot():
                ready.set()
                release.wait(30)
        except slots.Busy as exc:
            failed.append(exc)
            ready.set()
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert ready.wait(30) and not failed
        yield
    finally:
        release.set()
        thread.join(30)


@pytest.mark.django_db(transaction=True)
def test_visitors_share_their_own_slots_and_leave_the_logged_in_page_one(settings, make_user, fake_verifier):
    """One public verification at a time (KILN_VERIFY_PUBLIC_CONCURRENCY) taken from the site's two: a
    second visitor waits (429, body unread), a logged-in viewer still verifies."""
    settings.KILN_VERIFY_PUBLIC_CONCURRENCY, settings.KILN_VERIFY_CONCURRENCY = 1, 2
    settings.KILN_VERIFY_RETRY_AFTER_S = 6
    viewer = Client()
    viewer.force_login(make_user("vic", "viewer"))
    with public_slot_held():
        refused = Client().post(PUBLIC, {"pdf": _upload(b"x")}, HTTP_ACCEPT="application/json")
        logged_in = viewer.post(reverse("certificates:certificate_verify"), {"pdf": _upload(b"x")})
    assert refused.status_code == 429 and refused["Retry-After"] == "6"
    assert "for visitors" in refused.json()["detail"]
    assert logged_in.status_code == 200 and len(fake_verifier) == 1
    assert Client().post(PUBLIC, {"pdf": _upload(b"x")}).status_code == 200, "free again"


@pytest.mark.django_db(transaction=True)  # a WSGI request closes the connection (request_started)
def test_a_400_mib_public_upload_is_refused_before_a_byte_is_read(fake_verifier):
    body, length = _multipart(400 * MiB)
    status, read = _wsgi(None, body, length, PUBLIC)
    assert status == 413 and read == 0 and fake_verifier == []
    assert PublicVerifyCount.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_public_upload_is_not_read_while_the_site_is_busy(fake_verifier, make_user, settings):
    settings.KILN_VERIFY_CONCURRENCY = 1
    with held_elsewhere(make_user("other", "viewer").pk):
        body, length = _multipart(10 * MiB)
        status, read = _wsgi(None, body, length, PUBLIC)
    assert status == 429 and read == 0 and fake_verifier == []


def test_with_no_public_slots_the_page_is_off(db, settings, fake_verifier):
    settings.KILN_VERIFY_PUBLIC_CONCURRENCY = 0
    assert Client().get(PUBLIC).status_code == 404
    assert Client().post(PUBLIC, {"pdf": _upload(b"x")}).status_code == 404
    assert fake_verifier == []


def test_on_sqlite_the_public_slots_are_file_locks_of_their_own(tmp_path, settings, monkeypatch):
    settings.DATA_DIR, settings.KILN_VERIFY_PUBLIC_CONCURRENCY, settings.KILN_VERIFY_CONCURRENCY = tmp_path, 1, 2
    settings.KILN_VERIFY_PER_USER = 1
    monkeypatch.setattr(slots, "connection", type("C", (), {"vendor": "sqlite"})())
    with slots.public_slot():
        with pytest.raises(slots.Busy) as busy:
            with slots.public_slot():
                pass
        assert busy.value.scope == "public"
        with slots.verification_slot(5):  # a logged-in user still gets the site's other slot
            pass
    assert sorted(p.name for p in (tmp_path / "locks").iterdir()) == ["verify-0-0", "verify-0-1", "verify-5-0",
                                                                       "verify-public-0"]  # fmt: skip


@pytest.mark.parametrize(
    ("value", "shown"),
    [("https://kiln.example.com/", "https://kiln.example.com"), ("", ""), ("kiln.example.com", None)],
)
def test_the_public_url_is_an_http_address_or_nothing(tmp_path, value, shown):
    """KILN_PUBLIC_URL: a trailing slash dropped, empty left empty, an address without its scheme refused."""
    code = "import django; django.setup(); from django.conf import settings; print(repr(settings.KILN_PUBLIC_URL))"
    env = {**_env(tmp_path, KILN_ENV_FILE="", KILN_PUBLIC_URL=value), "DJANGO_SETTINGS_MODULE": "portal.settings"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    if shown is None:
        assert done.returncode != 0 and "KILN_PUBLIC_URL='kiln.example.com' must start with https://" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == repr(shown)
