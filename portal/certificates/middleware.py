"""Refusals of the certified-evidence triggers (immutability.py) as a 403, not a 500: a page, or
for the REST API `{"detail": ...}` in JSON like its every other error (portal/api/exceptions.py).
The admission of certificate verifications before their upload is read is portal/api/admission.py's
(it reads an API token)."""

from __future__ import annotations

from collections.abc import Callable

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.utils.html import escape

from portal.middleware import API_PREFIX

MARKER = "kiln: "
WHY = "Evidence cited by an issued certificate, and the certificate itself, cannot be changed."


def refusal(exc: BaseException) -> str | None:
    """The trigger's message when `exc` is a certified-evidence refusal, else None."""
    if not isinstance(exc, DatabaseError):
        return None
    text = str(exc)
    at = text.find(MARKER)
    if at < 0:
        return None
    return text[at + len(MARKER) :].splitlines()[0].strip()


class CertifiedEvidenceMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        message = refusal(exception)
        if message is None:
            return None
        if request.path.startswith(API_PREFIX):
            return JsonResponse({"detail": f"Refused: {message}. {WHY}"}, status=403)
        return HttpResponseForbidden(
            f"<!doctype html><title>Refused</title><h1>Refused</h1><p>{escape(message)}.</p><p>{WHY}</p>"
        )
