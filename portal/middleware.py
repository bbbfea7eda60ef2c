"""Web hardening middleware: refuse unreadable input with a 400, and send a Content-Security-Policy.

Both are small on purpose (docs/security.md, "Web hardening"): Django 5.2 has no CSP of its own (6.0
adds one), and what the policy allows is decided in settings.KILN_CSP, with a reason for each source.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError

# C0 controls and DEL. Tab, line feed and carriage return are ordinary in form fields (text areas,
# pasted lists); in a path nothing below 0x20 is. A lone surrogate cannot be encoded as UTF-8 and so
# cannot be stored, printed or sent on.
_BAD_IN_FIELD = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
_BAD_IN_PATH = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
# Django keeps the bytes of a path that are not UTF-8 percent-encoded in path_info (upper-case hex, by
# django.utils.encoding.repercent_broken_unicode); the raw bytes are gone by the time a middleware
# runs. No Kiln path has a '%' of its own: names in URLs are host and cluster names, ids, and the
# admin's own `_XX` quoting, so a percent sign followed by a byte of 0x80 or more is one of those.
_REPERCENTED = re.compile(r"%[89A-F][0-9A-F]")
_NAMES = {0: "NUL", 9: "TAB", 10: "LF", 13: "CR", 0x7F: "DEL"}
_URLENCODED = "application/x-www-form-urlencoded"
API_PREFIX = "/api/"


def _describe(char: str) -> str:
    code = ord(char)
    if 0xD800 <= code <= 0xDFFF:
        return f"a lone surrogate (U+{code:04X})"
    return f"the control character {_NAMES.get(code, f'0x{code:02X}')}"


def unreadable(text: str) -> str | None:
    """What makes a text field unacceptable (a NUL, another control character, a lone surrogate),
    or None. The REST API's JSON parser checks every string of a body with it (portal/api/parsers.py)."""
    match = _BAD_IN_FIELD.search(text)
    return _describe(match.group()) if match else None


def _bad_request(where: str, what: str, path: str = "") -> HttpResponse:
    if path.startswith(API_PREFIX):  # the REST API answers every error in JSON (portal/api/exceptions.py)
        return JsonResponse({"detail": f"Bad request: {where} holds {what}, which Kiln does not accept."}, status=400)
    return HttpResponseBadRequest(
        f"Bad request: {where} holds {what}, which Kiln does not accept.\n", content_type="text/plain; charset=utf-8"
    )


_HIGH_ESCAPE = re.compile(r"%[89a-fA-F]")
_HIGH_ESCAPE_BYTES = re.compile(rb"%[89a-fA-F]")


def _not_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _encoded_not_utf8(encoded: str | bytes) -> bool:
    """Whether percent-encoded form data (a query string, a form body) decodes to bytes that are not
    UTF-8. Plain ASCII without an escape of a byte >= 0x80 is UTF-8: answered without decoding."""
    if isinstance(encoded, str):
        if encoded.isascii() and not _HIGH_ESCAPE.search(encoded):
            return False
        encoded = encoded.encode("latin-1", "replace")  # WSGI strings hold the raw bytes as latin-1
    elif encoded.isascii() and not _HIGH_ESCAPE_BYTES.search(encoded):
        return False
    return _not_utf8(unquote_to_bytes(encoded.replace(b"+", b" ")))


class RejectUnreadableInputMiddleware:
    """400 for a path, query string or form field holding a NUL or another control character, a lone
    surrogate, or bytes that are not UTF-8 (percent-encoded or not).

    Without it such input reaches the views: PostgreSQL refuses a NUL in a query parameter ("A string
    literal cannot contain NUL (0x00) characters"), which surfaced as a 500 on any page that looks a
    name up (`/clusters/a%00b/`). Django itself only re-percent-encodes broken UTF-8 in the path and
    replaces it with U+FFFD in parameters, so the raw bytes are checked here. File uploads are not
    inspected (their content is the view's business); their field names and the other fields are."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.check(request) or self.get_response(request)

    def check(self, request: HttpRequest) -> HttpResponse | None:
        bad = self._find(request)
        return _bad_request(*bad, path=request.path_info) if bad else None

    def _find(self, request: HttpRequest) -> tuple[str, str] | None:
        if _REPERCENTED.search(request.path_info):
            return ("the URL path", "bytes that are not UTF-8")
        if match := _BAD_IN_PATH.search(request.path_info):
            return ("the URL path", _describe(match.group()))
        query = request.META.get("QUERY_STRING", "")
        if query:
            if _encoded_not_utf8(query):
                return ("the query string", "bytes that are not UTF-8")
            if bad := self._bad_field(request.GET.lists()):
                return (f"the query parameter {bad[0]!r}", bad[1])
        if request.method in ("POST", "PUT", "PATCH", "DELETE"):
            content_type = request.META.get("CONTENT_TYPE", "")
            if content_type.startswith(_URLENCODED) and _encoded_not_utf8(request.body):
                return ("the form data", "bytes that are not UTF-8")
            try:
                fields = request.POST.lists()
            except MultiPartParserError:  # a multipart type without its boundary: a 500 otherwise
                return ("the form data", "a malformed multipart body")
            if bad := self._bad_field(fields):
                return (f"the form field {bad[0]!r}", bad[1])
            for name in request.FILES:
                if match := _BAD_IN_FIELD.search(name):
                    return ("a file field's name", _describe(match.group()))
        return None

    @staticmethod
    def _bad_field(items: object) -> tuple[str, str] | None:
        for name, values in items:  # type: ignore[attr-defined]
            for text in (name, *values):
                if match := _BAD_IN_FIELD.search(text):
                    shown = _BAD_IN_FIELD.sub("?", name)[:40]
                    return shown, _describe(match.group())
        return None


class ContentSecurityPolicyMiddleware:
    """Sends settings.KILN_CSP as the Content-Security-Policy header of every response that has none."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.policy = "; ".join(f"{name} {' '.join(sources)}".strip() for name, sources in settings.KILN_CSP.items())

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = self.policy
        return response


def client_ip(request: HttpRequest) -> str | None:
    """The client's address for login throttling (settings.AXES_CLIENT_IP_CALLABLE): REMOTE_ADDR, or
    with KILN_PROXY_COUNT=N trusted proxies in front, each appending the address it received from to
    X-Forwarded-For, the N-th entry from the right: the one the outermost proxy saw. Entries further
    left were written by the client and are not trusted."""
    count = int(settings.KILN_PROXY_COUNT)
    if count > 0:
        hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
        if len(hops) >= count:
            return hops[-count]
    return request.META.get("REMOTE_ADDR")
