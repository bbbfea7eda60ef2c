"""The testbed's Redfish facility service (testbed/sim/redfish_facility.py) run inside one of the
testbed's own namespaces, as a site's PDUs and CDU controller sit on their own management address.

    service = start_facility(tb, config, host="gpu13")
    service.base_url                 # http://10.x.0.14:8080
    service.url("pdu", "r1-a")       # .../redfish/v1/PowerEquipment/RackPDUs/r1-a
    service.update(config)           # plant or clear a fault: the service rereads its config
    service.stop()                   # also done by Testbed.down(): it kills what runs in its namespaces

Its readings follow the nodes' simulated load (their state files under the testbed's nodes/ folder).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.cluster import Testbed
from testbed.procs import TestbedError

REPO = Path(__file__).resolve().parents[1]
# The service prints its address once it serves; a cold Python start in a namespace takes < 1 s.
START_TIMEOUT_S = 15.0
PATHS = {"pdu": "PowerEquipment/RackPDUs", "loop": "ThermalEquipment/CDUs"}


@dataclass
class FacilityService:
    base_url: str
    config_path: Path
    process: subprocess.Popen[str]

    def url(self, kind: str, ident: str) -> str:
        return f"{self.base_url}/redfish/v1/{PATHS[kind]}/{ident}"

    def update(self, config: dict[str, Any]) -> None:
        write_config(self.config_path, config)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def write_config(path: Path, config: dict[str, Any]) -> None:
    """Atomically, so the service never reads half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(config, indent=1))
    os.replace(tmp, path)


def start_facility(tb: Testbed, config: dict[str, Any], *, host: str, port: int = 8080) -> FacilityService:
    node = tb.node(host)
    config_path = tb.workdir / "facility.json"
    write_config(config_path, config)
    argv = ["ip", "netns", "exec", node.netns, sys.executable, "-m", "testbed.sim.redfish_facility"]
    argv += ["--config", str(config_path), "--state-dir", str(tb.workdir / "nodes"), "--bind", node.address]
    argv += ["--port", str(port)]
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if "listening on " in line:
            return FacilityService(line.split("listening on ", 1)[1].strip(), config_path, process)
        if not line and process.poll() is not None:
            break
    process.kill()
    rest = process.stdout.read() if process.stdout else ""
    raise TestbedError(f"redfish_facility did not start in {host}'s namespace: {rest[-500:]}")
