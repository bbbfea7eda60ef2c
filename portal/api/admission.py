"""The admission of certificate verifications (portal/certificates/slots.py) before their upload is
read, for the verify page and the REST API's verify endpoint alike, and for the public verify page
(per client address, then slots of its own). It lives in the API app because
it authenticates an API token itself: DRF does so only in the view, after the body is parsed."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from rest_framework.exceptions import AuthenticationFailed

from portal import uploads
from portal.api.authentication import TokenAuthentication
from portal.certificates import public, services, slots
from portal.middleware import API_PREFIX, client_ip


class VerificationAdmissionMiddleware:
    """A verification upload takes its slots (slots.py) before its body is read: one over the limit
    is answered 429 with Retry-After at once, its body never parsed, so a flood of uploads holds no
    more web threads than there are slots (plus the moments to discard the refused bodies). The slots
    are held to the end of the request (the parse, the verification, the page), so the views take
    none themselves."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST" or request.path_info not in _verify_paths():
            return self.get_response(request)
        if request.path_info == _public_path():
            return self._public(request)
        user_id = _user_id(request)
        if user_id is None:
            # An anonymous upload is answered before its body is read: the CSRF check would otherwise
            # parse it (up to the size limit) only to refuse it. A small form goes on to the usual
            # refusals (400 for unreadable input, then the login page).
            if request.content_type == "multipart/form-data":
                return _anonymous(request)
            return self.get_response(request)
        refused = uploads.refusal(request)  # a 400 MiB body gets its 413 (and is not read), not a 429
        if refused is not None:
            return refused
        try:
            with slots.verification_slot(user_id):
                return self.get_response(request)
        except slots.Busy as exc:
            return _busy(request, exc)

    def _public(self, request: HttpRequest) -> HttpResponse:
        """The public verify page, for anyone (a session or token changes nothing there): the size
        limit, then KILN_VERIFY_PUBLIC_PER_HOUR uploads per client address, then the public and the
        site's slots, each before the body is read."""
        if int(settings.KILN_VERIFY_PUBLIC_CONCURRENCY) <= 0:
            return self.get_response(request)  # the page is off: the view answers 404
        refused = uploads.refusal(request)
        if refused is not None:
            return refused
        wait = services.public_verify_admit(address=client_ip(request) or "")
        if wait:
            limit = int(settings.KILN_VERIFY_PUBLIC_PER_HOUR)
            return _public_refusal(request, f"this address has sent {limit} certificates this hour", wait)
        try:
            with slots.public_slot():
                return self.get_response(request)
        except slots.Busy as exc:
            return _public_refusal(request, exc.what, exc.retry_after)


@functools.cache
def _verify_paths() -> tuple[str, ...]:
    return (
        reverse("certificates:certificate_verify"),
        reverse("api:certificate-verify"),
        reverse("api:certificate-verify-hardware"),
        _public_path(),
    )


@functools.cache
def _public_path() -> str:
    return reverse("certificates:public_verify")


def _public_refusal(request: HttpRequest, why: str, retry_after: int) -> HttpResponse:
    """429 with Retry-After, its body never read: JSON for a script, else the public page."""
    text = f"Not verified: {why}. Nothing was read or checked: send the file again in {retry_after} s."
    response: HttpResponse
    if public.wants_json(request):
        response = JsonResponse({"detail": text}, status=429)
    else:
        context = {"refusal": text, "ca_fingerprint": public.site_ca_fingerprint()}
        response = render(request, "certificates/public_verify.html", context, status=429)
    response["Retry-After"] = str(retry_after)
    return response


def _user_id(request: HttpRequest) -> int | None:
    """The session's user, or the API token's (DRF authenticates only in the view, after the body)."""
    if request.user.is_authenticated:
        return int(request.user.pk)
    try:
        found = TokenAuthentication().authenticate(request)  # type: ignore[arg-type]
    except AuthenticationFailed:
        return None
    return int(found[0].pk) if found else None


def _anonymous(request: HttpRequest) -> HttpResponse:
    if request.path_info.startswith(API_PREFIX):
        response = JsonResponse({"detail": "Authentication credentials were not provided."}, status=401)
        response["WWW-Authenticate"] = "Token"
        response["Connection"] = "close"  # gunicorn would otherwise read and discard the body
        return response
    return redirect_to_login(request.get_full_path())


def _busy(request: HttpRequest, exc: slots.Busy) -> HttpResponse:
    response: HttpResponse
    if request.path_info.startswith(uploads.API_PREFIX):
        response = JsonResponse({"detail": f"Busy: {exc}."}, status=429)
    else:
        response = render(request, "certificates/verify_busy.html", {"busy": exc}, status=429)
    # The connection stays open: the client reads its 429 rather than a reset. gunicorn discards the
    # rest of the body (within KILN_MAX_UPLOAD_MB, checked above) without parsing or storing it.
    response["Retry-After"] = str(exc.retry_after)
    return response
