"""Fixtures for the health tests: the portal unit fixtures, eager Celery, a webhook receiver, a
simulated Slurm/Kubernetes controller (the testbed's fake scontrol and kubectl)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.portal.conftest import cluster, make_run, quick_plan  # noqa: F401 (fixtures)


@pytest.fixture
def eager_celery() -> Iterator[None]:
    """Tasks run in the calling process (the unit tests have no broker)."""
    from worker.celery import app

    saved = (app.conf.task_always_eager, app.conf.task_eager_propagates)
    app.conf.task_always_eager, app.conf.task_eager_propagates = True, True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = saved


@pytest.fixture
def token(settings: Any) -> str:
    """The /metrics bearer token, configured."""
    settings.KILN_METRICS_TOKEN = "s3cret-token"
    return "s3cret-token"


@dataclass
class Receiver:
    """A webhook endpoint on 127.0.0.1: records JSON bodies, answers with `statuses` in turn."""

    url: str = ""
    bodies: list[Any] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)


@pytest.fixture
def webhook() -> Iterator[Receiver]:
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            receiver.bodies.append(json.loads(body))
            status = receiver.statuses.pop(0) if receiver.statuses else 200
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b"ok" if status < 300 else b"boom")

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield receiver
    server.shutdown()
    server.server_close()


@dataclass
class Controller:
    """The fake scontrol/kubectl on this host, configured the way a site configures the real ones:
    server settings (KILN_CONTROLLER_TRANSPORT=local, KILN_SCONTROL_PATH, KILN_KUBECTL_PATH) and
    the worker's own environment; `calls()` reads what they recorded."""

    calls_file: Path
    monkeypatch: pytest.MonkeyPatch
    scontrol: Path
    kubectl: Path

    def calls(self) -> list[list[str]]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line)["argv"] for line in self.calls_file.read_text().splitlines() if line.strip()]

    def fail(self, *, calls: int | None = None) -> None:
        """Make the controller fail every call (slurmctld down), or only the first `calls`."""
        if calls is None:
            self.monkeypatch.setenv("KILN_SIM_SCHED_FAIL", "1")
        else:
            self.monkeypatch.setenv("KILN_SIM_SCHED_FAIL_CALLS", str(calls))


@pytest.fixture(scope="session")
def sim_paths(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from testbed.sim import build_simulator

    return build_simulator(tmp_path_factory.mktemp("sim"))


@pytest.fixture
def controller(sim_paths: Any, tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Controller:
    calls = tmp_path / "controller.calls"
    settings.KILN_CONTROLLER_TRANSPORT = "local"
    settings.KILN_SCONTROL_PATH = str(sim_paths.bin_dir / "scontrol")
    settings.KILN_KUBECTL_PATH = str(sim_paths.bin_dir / "kubectl")
    monkeypatch.setenv("KILN_SIM_CALLS", str(calls))
    for name in ("KILN_SIM_SCHED_FAIL", "KILN_SIM_SCHED_FAIL_CALLS"):
        monkeypatch.delenv(name, raising=False)
    return Controller(
        calls_file=calls,
        monkeypatch=monkeypatch,
        scontrol=sim_paths.bin_dir / "scontrol",
        kubectl=sim_paths.bin_dir / "kubectl",
    )
