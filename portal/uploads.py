"""The size of an upload, enforced while it streams: 413 before the body is read, not after.

Django writes a multipart file to a temporary file as it reads it, and the views learnt the size only
then: a 400 MiB upload was streamed to disk in full before "larger than 50 MiB" was said. gunicorn has
no request-body limit of its own. So a body whose Content-Length is over the limit is refused before a
byte is read, and a file that grows past KILN_MAX_UPLOAD_MB as it streams stops the parser there
(UploadLimitHandler, first of FILE_UPLOAD_HANDLERS). A chunked body (no Content-Length) is refused
with 411. Each time the connection is closed after the answer: gunicorn would otherwise read and
discard the rest of the body to reach the next keep-alive request.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.files.uploadhandler import FileUploadHandler
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError

from portal.middleware import _bad_request as bad_request

API_PREFIX = "/api/"


def file_limit() -> int:
    return int(settings.KILN_MAX_UPLOAD_MB) * 1024**2


def body_limit() -> int:
    """A file at the limit plus the other fields Django accepts in memory."""
    return file_limit() + int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0)


class UploadTooLarge(RequestDataTooBig):
    """A RequestDataTooBig (400) wherever it is not turned into the 413 below."""


class UploadLimitHandler(FileUploadHandler):
    """Passes each chunk on to the next handler, until the file or the body is over the limit."""

    def handle_raw_input(
        self, input_data: Any, META: Any, content_length: int, boundary: Any, encoding: Any = None
    ) -> None:
        if content_length > body_limit():
            raise UploadTooLarge(f"a body of {content_length} bytes")

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        if start + len(raw_data) > file_limit():
            raise UploadTooLarge(f"a file of more than {file_limit()} bytes")
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None


def close_after(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """Close the client's connection once `response` is sent, so that no server reads the rest of a
    body nobody will use (gunicorn ignores a Connection header from the application)."""
    response["Connection"] = "close"
    sock = request.META.get("gunicorn.socket")
    if isinstance(sock, socket.socket):

        def shut() -> None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the client went first

        response._resource_closers.append(shut)  # type: ignore[attr-defined]  # HttpResponse.close runs them
    return response


def too_large(request: HttpRequest) -> HttpResponse:
    limit = int(settings.KILN_MAX_UPLOAD_MB)
    return _refusal(request, 413, f"The upload is larger than {limit} MiB, the most Kiln accepts (KILN_MAX_UPLOAD_MB).")


def length_required(request: HttpRequest) -> HttpResponse:
    """Django reads no body without a Content-Length (the view would see an empty form), and gunicorn
    would then read and discard every chunk to reach the next request."""
    return _refusal(request, 411, "A request body needs a Content-Length: chunked bodies are not accepted.")


def _refusal(request: HttpRequest, status: int, text: str) -> HttpResponse:
    if request.path_info.startswith(API_PREFIX):
        response: HttpResponse = JsonResponse({"detail": text}, status=status)
    else:
        response = HttpResponse(text + "\n", content_type="text/plain; charset=utf-8", status=status)
    return close_after(request, response)


def refusal(request: HttpRequest) -> HttpResponse | None:
    """413 for a Content-Length over the limit, 411 for a chunked body; None for the rest."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0  # Django reads no body then
    if length > body_limit():
        return too_large(request)
    if "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
        return length_required(request)
    return None


class UploadLimitMiddleware:
    """413 for a body over the limit: on its Content-Length at once, or when the multipart parser
    (run here, before any other middleware reads the form) meets a file over it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        refused = refusal(request)
        if refused is not None:
            return refused
        if request.method == "POST" and request.META.get("CONTENT_TYPE", "").startswith("multipart/"):
            try:
                request.POST  # noqa: B018  (parses the body through the upload handlers)
            except UploadTooLarge:
                return too_large(request)
            except MultiPartParserError:  # a multipart type without its boundary: a 500 otherwise
                return bad_request("the form data", "a malformed multipart body", path=request.path_info)
        return self.get_response(request)
