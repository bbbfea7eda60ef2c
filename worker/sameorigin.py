"""HTTP requests that stay on the origin they were made for (scheme, host and port).

urllib follows a redirect with every header of the request, Authorization included: a Redfish
endpoint answering 302 to another host would receive the PDU's password there, and a webhook's alert
would be posted (as a GET, its body dropped) wherever the receiver points. Here a redirect to another
origin is refused, never followed: the caller's error says where it pointed. A POST follows no
redirect at all (urllib turns it into a GET without its body: the alert would be lost, yet "sent").
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from http.client import HTTPMessage
from typing import IO
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


class RedirectRefused(urllib.error.URLError):
    """A redirect Kiln did not follow; `reason` says where it pointed (an origin, never a path,
    which may hold a token)."""


def origin(url: str) -> str:
    """scheme://host:port of an http(s) URL, lower case, the default port written out."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme, 0)
    except ValueError:
        port = -1  # an unreadable port matches no origin
    host = (parts.hostname or "").lower()
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: HTTPMessage, newurl: str
    ) -> urllib.request.Request | None:
        there = origin(newurl)
        if there != origin(req.full_url):
            raise RedirectRefused(f"redirected to another origin: HTTP {code} to {there[:100]}, not followed")
        if req.get_method() not in ("GET", "HEAD"):
            raise RedirectRefused(f"redirected: HTTP {code} for a {req.get_method()}, not followed")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def opener(context: ssl.SSLContext | None = None) -> urllib.request.OpenerDirector:
    """An opener like urlopen's that follows redirects on the request's own origin only."""
    handlers: list[urllib.request.BaseHandler] = [_SameOriginRedirects()]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)
