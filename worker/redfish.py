"""Reading facility Redfish endpoints (rack PDUs, CDUs) at a fixed interval during a heat soak.

The worker side of checks/core/fanout.py's `facility_readers`: for each endpoint, the configured resource
(e.g. .../RackPDUs/r1-a) is read once to find the collection its reader names ("Mains"), then every
interval the collection's members are fetched and handed to the reader, a pure function of
checks/. One thread per endpoint; a request that takes longer than the interval costs that
endpoint's readings at those instants (None), never the nodes' sampling or another endpoint's.

HTTP basic auth over the endpoint's URL; TLS certificates are verified against the system's CA
store (unless the operator turned verification off for that endpoint). Links are followed only on
the endpoint's own scheme, host and port, as paths from its service (a hostile document cannot point
the worker elsewhere), and an HTTP redirect only on that origin too (worker/sameorigin.py): the
credential is never sent to another scheme, host or port. Responses are read up to MAX_BODY bytes.
Credentials never appear in an error text, a log line or the readings document.
Standard library only (urllib): three GETs a second per endpoint need no session layer.
"""

from __future__ import annotations

import base64
import json
import math
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

from checks.core.fanout import Readings
from worker import sameorigin
from worker.endpoints import Endpoint

# A Redfish Circuit or CoolantConnector document is a few kB (DMTF mockups: 1.5-4 kB); 1 MiB leaves
# room for vendor OEM sections and stops a hostile endpoint from filling the worker's memory.
MAX_BODY = 1 << 20
# Each request's timeout: an answer later than this is not "this second's" reading anyway.
REQUEST_TIMEOUT_S = 2.0
# Errors kept per endpoint (the first ones, with a count of the rest): enough to say why.
MAX_ERRORS = 5


class RedfishError(Exception):
    pass


def _tls_context(endpoint: Endpoint) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if not endpoint.verify_tls:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class _Client:
    def __init__(self, endpoint: Endpoint) -> None:
        parts = urlsplit(endpoint.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RedfishError(f"not an http(s) URL: {endpoint.url[:100]!r}")
        self.origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
        self.url = endpoint.url
        self.headers = {"Accept": "application/json", "OData-Version": "4.0"}
        if endpoint.username or endpoint.password:
            token = base64.b64encode(f"{endpoint.username}:{endpoint.password}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"
        self.opener = sameorigin.opener(_tls_context(endpoint) if parts.scheme == "https" else None)

    def get_text(self, url: str) -> str:
        request = urllib.request.Request(url, headers=self.headers, method="GET")
        try:
            with self.opener.open(request, timeout=REQUEST_TIMEOUT_S) as response:
                body = response.read(MAX_BODY + 1)
        except urllib.error.HTTPError as exc:
            raise RedfishError(f"GET {urlsplit(url).path}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            why = getattr(exc, "reason", exc)
            raise RedfishError(f"GET {urlsplit(url).path}: {why}") from None
        if len(body) > MAX_BODY:
            raise RedfishError(f"GET {urlsplit(url).path}: answer over {MAX_BODY} bytes")
        return body.decode("utf-8", "replace")

    def get_json(self, url: str) -> dict[str, Any]:
        try:
            doc = json.loads(self.get_text(url))
        except ValueError:
            raise RedfishError(f"GET {urlsplit(url).path}: not JSON") from None
        if not isinstance(doc, dict):
            raise RedfishError(f"GET {urlsplit(url).path}: not a JSON object")
        return doc

    def link(self, doc: dict[str, Any], key: str) -> str:
        """The URL of doc[key]["@odata.id"] on this endpoint's own origin."""
        ref = doc.get(key)
        path = ref.get("@odata.id") if isinstance(ref, dict) else None
        if not isinstance(path, str) or not path.startswith("/") or path.startswith("//"):
            raise RedfishError(f"{key}: no usable @odata.id link")
        return urljoin(self.origin, path)

    def members(self, collection_url: str) -> list[str]:
        doc = self.get_json(collection_url)
        found = doc.get("Members")
        if not isinstance(found, list) or not found:
            raise RedfishError(f"GET {urlsplit(collection_url).path}: no Members")
        return [self.link({"m": m}, "m") for m in found[:16]]  # a PDU has a few inlets, a CDU a few connectors


@dataclass
class _Track:
    endpoint: Endpoint
    t: list[float] = field(default_factory=list)
    readings: dict[str, list[float | None]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    requests: int = 0

    def error(self, why: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(why)

    def add(self, t: float, values: Readings) -> None:
        n = len(self.t)
        for key in values:
            self.readings.setdefault(key, [None] * n)
        self.t.append(round(t, 3))
        for key, column in self.readings.items():
            value = values.get(key)
            column.append(value if isinstance(value, (int, float)) and math.isfinite(value) else None)

    def document(self) -> dict[str, Any]:
        errors = list(self.errors)
        if self.error_count > len(errors):
            errors.append(f"... and {self.error_count - len(errors)} more errors")
        e = self.endpoint
        return {
            "kind": e.kind,
            "name": e.name,
            "t": self.t,
            "readings": self.readings,
            "errors": errors,
            "requests": self.requests,
        }


def sample_endpoint(
    endpoint: Endpoint,
    *,
    link: str,
    read: Callable[[list[str]], Readings],
    start_at: float,
    duration_s: float,
    interval_s: float,
    stop: threading.Event,
) -> dict[str, Any]:
    """Read one endpoint every interval from start_at for duration_s (or until stop is set)."""
    track = _Track(endpoint)
    if endpoint.problem:  # e.g. its credential sealed under a key this server no longer holds
        track.error(f"{endpoint.name}: {endpoint.problem}")
        return track.document()
    try:
        client = _Client(endpoint)
        members = client.members(client.link(client.get_json(client.url), link))
    except RedfishError as exc:
        track.error(f"{endpoint.name}: {exc}")
        return track.document()
    k = 0
    while not stop.is_set() and k * interval_s < duration_s:
        at = start_at + k * interval_s
        if stop.wait(max(0.0, at - time.time())):
            break
        if time.time() - at < interval_s:  # a tick missed by a slow answer is skipped, not bunched
            _tick(client, members, read, track, at - start_at)
        k += 1
    return track.document()


def _tick(client: _Client, members: list[str], read: Callable[[list[str]], Readings], track: _Track, t: float) -> None:
    try:
        texts = []
        for url in members:
            track.requests += 1
            texts.append(client.get_text(url))
        values = read(texts)
    except RedfishError as exc:
        track.error(str(exc))
        values = {}
    except Exception as exc:  # a reader's complaint about a hostile document: no reading, named
        track.error(f"{urlsplit(members[0]).path}: unreadable ({type(exc).__name__}: {str(exc)[:120]})")
        values = {}
    track.add(t, values)
