"""A credential goes only to the origin it was entered for: a Redfish endpoint or a webhook receiver
that answers with a redirect to another origin (here 127.0.0.2, a second listener) is not followed
there, and the error says so. Real HTTP servers on two loopback addresses."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from checks.soak.samples import FACILITY_READERS
from portal.health.notify import DeliveryError, post_json
from worker.endpoints import Endpoint
from worker.redfish import sample_endpoint
from worker.sameorigin import origin

PASSWORD = "S3cret-PDU-pass"
BASIC = base64.b64encode(f"pduadmin:{PASSWORD}".encode()).decode()
RACK_PDU = "/redfish/v1/PowerEquipment/RackPDUs/r1-a"


@dataclass
class Listener:
    """One HTTP server: what it received (method, path, Authorization or body), and the redirect it
    answers with (`location`, `status`), or a Redfish PDU document when none (or under /moved)."""

    host: str
    location: str = ""
    status: int = 302
    seen: list[tuple[str, str, str]] = field(default_factory=list)
    url: str = ""


def _serve(listener: Listener) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode() if length else ""
            listener.seen.append((self.command, self.path, self.headers.get("Authorization", "") + body))
            if listener.location and not self.path.startswith("/moved"):
                self.send_response(listener.status)
                self.send_header("Location", listener.location + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            doc = json.dumps({"Id": "r1-a", "Mains": {"@odata.id": f"{RACK_PDU}/Mains"}, "Members": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(doc)))
            self.end_headers()
            self.wfile.write(doc)

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer((listener.host, 0), Handler)
    listener.url = f"http://{listener.host}:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def pair() -> Iterator[tuple[Listener, Listener]]:
    """(the origin the credential was entered for, on 127.0.0.1; another origin, on 127.0.0.2)."""
    listeners = (Listener("127.0.0.1"), Listener("127.0.0.2"))
    servers = [_serve(listener) for listener in listeners]
    yield listeners
    for server in servers:
        server.shutdown()
        server.server_close()


def _sample(url: str) -> dict[str, Any]:
    reader = FACILITY_READERS["pdu"]
    endpoint = Endpoint("pdu", "r1-a", url, "pduadmin", PASSWORD)
    return sample_endpoint(
        endpoint,
        link=reader.link,
        read=reader.read,
        start_at=time.time(),
        duration_s=0.5,
        interval_s=0.5,
        stop=threading.Event(),
    )


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redfish_redirect_to_another_origin_never_receives_the_credential(pair, status: int) -> None:
    pdu, other = pair
    pdu.location, pdu.status = other.url, status
    doc = _sample(pdu.url + RACK_PDU)
    assert pdu.seen == [("GET", RACK_PDU, f"Basic {BASIC}")]  # the endpoint's own origin: it was entered for it
    assert other.seen == []
    assert doc["t"] == [] and len(doc["errors"]) == 1
    assert f"redirected to another origin: HTTP {status} to {origin(other.url)}" in doc["errors"][0]
    assert PASSWORD not in json.dumps(doc) and BASIC not in json.dumps(doc)


def test_a_redfish_redirect_to_another_port_or_scheme_is_another_origin(pair) -> None:
    pdu, same_host = pair[0], Listener("127.0.0.1")
    server = _serve(same_host)
    try:
        for target in (same_host.url, pdu.url.replace("http://", "https://")):
            pdu.location, pdu.seen[:] = target, []
            doc = _sample(pdu.url + RACK_PDU)
            assert "redirected to another origin" in doc["errors"][0], doc
        assert same_host.seen == []
    finally:
        server.shutdown()
        server.server_close()


def test_a_redfish_redirect_on_its_own_origin_is_still_followed(pair) -> None:
    pdu = pair[0]
    pdu.location = pdu.url + "/moved"
    _sample(pdu.url + RACK_PDU)
    assert pdu.seen[:2] == [("GET", RACK_PDU, f"Basic {BASIC}"), ("GET", f"/moved{RACK_PDU}", f"Basic {BASIC}")]
    assert origin("http://127.0.0.1:80/x") == origin("HTTP://127.0.0.1/y") != origin("https://127.0.0.1/y")


@pytest.mark.django_db
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_webhook_redirect_is_not_followed_to_another_origin(pair, status: int) -> None:
    receiver, other = pair
    receiver.location, receiver.status = other.url, status
    with pytest.raises(DeliveryError) as refused:
        post_json(url=f"{receiver.url}/hook/T0KEN", body={"text": "n02: healthy -> failed"})
    assert f"redirected to another origin: HTTP {status} to {origin(other.url)}" in str(refused.value)
    assert "T0KEN" not in str(refused.value)
    assert [seen[:2] for seen in receiver.seen] == [("POST", "/hook/T0KEN")]
    assert other.seen == []


@pytest.mark.django_db
def test_a_webhook_redirect_on_its_own_origin_is_not_followed_either(pair) -> None:
    receiver = pair[0]
    receiver.location = receiver.url + "/moved"
    with pytest.raises(DeliveryError, match="HTTP 302 for a POST, not followed"):
        post_json(url=f"{receiver.url}/hook", body={"text": "alert"})
    assert [seen[:2] for seen in receiver.seen] == [("POST", "/hook")]  # not a GET with the body dropped
