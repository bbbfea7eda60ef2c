"""The testbed's Redfish facility service: rack PDUs and CDUs whose readings follow the nodes' load.

    python -m testbed.sim.redfish_facility --config FILE --state-dir DIR [--bind ADDR] [--port N]

Serves the facility of FILE (format: testbed/sim/facility.py) over HTTP, in the shapes of the DMTF
mockups (tests/fixtures/redfish-pdu/, redfish-cdu/: DMTF Redfish-Publications public-pdu and
public-cooling-unit):

    /redfish/v1/                                                ServiceRoot (no auth, DSP0266)
    /redfish/v1/PowerEquipment, .../RackPDUs                    PowerEquipment, collection
    /redfish/v1/PowerEquipment/RackPDUs/{id}                    PowerDistribution (RackPDU)
    .../RackPDUs/{id}/Mains, .../Mains/{circuit}                Circuit: PolyPhaseCurrentAmps.Line1..3
                                                                (CurrentAmps on one phase), PolyPhaseVoltage,
                                                                PolyPhasePowerWatts, RatedCurrentAmps
    .../RackPDUs/{id}/Outlets, .../Outlets/{n}                  Outlet per feed (UserLabel = node)
    .../RackPDUs/{id}/Metrics                                   PowerDistributionMetrics (PowerWatts)
    /redfish/v1/ThermalEquipment, .../CDUs                      ThermalEquipment, collection
    /redfish/v1/ThermalEquipment/CDUs/{id}                      CoolingUnit
    .../CDUs/{id}/PrimaryCoolantConnectors[/1]                  CoolantConnector: supply/return C, flow, heat
    .../CDUs/{id}/EnvironmentMetrics                            EnvironmentMetrics

Everything but /redfish and the service root needs HTTP basic auth with the config's username and
password (401 otherwise); unknown paths are 404, other methods 405. The config is read again when
its file changes, so the testbed plants and clears faults by rewriting it (atomically). Prints
"redfish_facility listening on http://ADDR:PORT" once it serves (--port 0: any free port) and stops
cleanly on SIGTERM or SIGINT. Never logs a request's headers (its credentials). Standard library only.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hmac
import json
import re
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from testbed.sim import facility_docs as docs
from testbed.sim.facility import ConfigError, Facility, load_config

Document = dict[str, Any]


class FacilityServer(ThreadingHTTPServer):
    """A threaded HTTP server holding the facility config (reloaded when the file changes)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], config_path: Path, state_dir: Path) -> None:
        self.config_path = Path(config_path)
        self.state_dir = Path(state_dir)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._facility = load_config(self.config_path)  # a bad config fails the start, loudly
        self._stamp = self._file_stamp()
        super().__init__(address, Handler)

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.config_path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)  # an atomic rewrite is a new inode

    def facility(self) -> Facility:
        """The current config; raises ConfigError when the rewritten file is not usable."""
        with self._lock:
            stamp = self._file_stamp()
            if stamp != self._stamp:
                self._facility = load_config(self.config_path)
                self._stamp = stamp
            return self._facility


def _route(path: str, facility: Facility, state_dir: Path) -> Document | None:
    """The document at this path, or None (404)."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] != ["redfish", "v1"]:
        return None
    rest = parts[2:]
    if not rest:
        return docs.service_root()
    if rest[0] == "PowerEquipment":
        return docs.power_document(rest[1:], facility, state_dir)
    if rest[0] == "ThermalEquipment":
        return docs.thermal_document(rest[1:], facility, state_dir)
    return None


OPEN_PATHS = re.compile(r"/redfish/?|/redfish/v1/?")  # DSP0266: the service root needs no authentication


class Handler(BaseHTTPRequestHandler):
    server: FacilityServer
    server_version = "KilnTestbedRedfish/1.0"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the request log would be noise in the testbed, and headers are never logged."""

    def _send(self, status: int, body: Document, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(body, indent=4).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("OData-Version", "4.0")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, code: str, message: str, extra: dict[str, str] | None = None) -> None:
        self._send(status, {"error": {"code": code, "message": message}}, extra)

    def _authorized(self, facility: Facility) -> bool:
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic" or not token:
            return False
        try:
            decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, sep, password = decoded.partition(":")
        ok_user = hmac.compare_digest(user.encode(), facility.username.encode())
        ok_password = hmac.compare_digest(password.encode(), facility.password.encode())
        return bool(sep) and ok_user and ok_password

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        try:
            facility = self.server.facility()
        except ConfigError as err:
            self._error(500, "Base.1.8.InternalError", f"facility config: {err}")
            return
        if not OPEN_PATHS.fullmatch(path) and not self._authorized(facility):
            challenge = {"WWW-Authenticate": 'Basic realm="Kiln testbed facility"'}
            self._error(401, "Base.1.8.NoValidSession", "authentication required", challenge)
            return
        if path in ("/redfish", "/redfish/"):
            self._send(200, {"v1": "/redfish/v1/"})
            return
        document = _route(path, facility, self.server.state_dir)
        if document is None:
            self._error(404, "Base.1.8.ResourceMissingAtURI", f"the resource at {path} does not exist")
            return
        self._send(200, document)

    do_HEAD = do_GET

    def _not_allowed(self) -> None:
        self._error(405, "Base.1.8.OperationNotAllowed", f"{self.command} is not allowed: the service is read-only")

    do_POST = do_PUT = do_PATCH = do_DELETE = _not_allowed


def make_server(config_path: Path, state_dir: Path, host: str = "127.0.0.1", port: int = 0) -> FacilityServer:
    """A bound server (port 0: any free one; server.server_address says which); call serve_forever()."""
    return FacilityServer((host, port), config_path, state_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.sim.redfish_facility", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, type=Path, help="facility config (JSON, testbed/sim/facility.py)")
    parser.add_argument("--state-dir", required=True, type=Path, help="node state files: DIR/NODE/state")
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: any free port)")
    args = parser.parse_args(argv)
    try:
        server = make_server(args.config, args.state_dir, args.bind, args.port)
    except ConfigError as err:
        print(f"redfish_facility: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"redfish_facility: cannot listen on {args.bind}:{args.port}: {err}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, name="redfish-facility", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    print(f"redfish_facility listening on http://{host!s}:{port}", flush=True)
    while not stop.wait(1.0):
        pass  # a bounded wait: signal handlers run between waits
    server.shutdown()
    server.server_close()
    thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
