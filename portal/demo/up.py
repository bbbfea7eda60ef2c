"""`make up`'s last step: the demo's facility service, a Celery worker, celery beat and the web server
on the embedded default (SQLite and a filesystem broker in the data folder), kept running by the
supervisor (portal/cli/supervise.py), then the demo's heat soak and what to open.

Run from the checkout as `.venv/bin/python -m portal.demo.up HOST PORT` (the Makefile execs it, so
no shell stands between make and this process to die of the Ctrl-C that stops the demo). Ctrl-C or a
TERM stops everything and exits 0, so make prints no "Error 130/143"; a program that keeps dying
stops everything and exits 1 after saying which and why.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from portal.cli.main import DEFAULT_WEB_WORKERS, WEB_THREADS
from portal.cli.supervise import Program, Supervisor

# The Makefile's BIN, relative to the checkout that make runs this from.
BIN = Path(".venv/bin")
# gunicorn with Django's imports takes a few seconds; 30 s covers a busy 2-CPU machine. Past it the
# hints are printed anyway (the web log says what is wrong, and the console names a crash).
PORT_WAIT_S = 30.0


def programs(*, data_dir: Path, host: str, port: int, facility_port: int) -> list[Program]:
    logs = data_dir / "logs"
    demo = data_dir / "demo"
    python, celery, gunicorn = (str(BIN / name) for name in ("python", "celery", "gunicorn"))
    # The demo's PDUs and CDU (Redfish, readings that follow the simulated nodes' load), for the heat
    # soak and the capacity page: kiln_demo wrote its config (portal/demo/facility.py).
    facility = [python, "-m", "testbed.sim.redfish_facility", "--config", str(demo / "facility.json"),
                "--state-dir", str(demo / "nodes"), "--port", str(facility_port)]  # fmt: skip
    web = [gunicorn, "portal.wsgi:application", "--bind", f"{host}:{port}", "--workers", str(DEFAULT_WEB_WORKERS),
           "--threads", str(WEB_THREADS), "--access-logfile", "-"]  # fmt: skip
    return [
        Program("facility", facility, logs / "facility.log"),
        # The settings' pool: threads, KILN_WORKER_CONCURRENCY node tasks at once (portal/settings.py).
        Program("worker", [celery, "-A", "worker", "worker", "--loglevel=INFO"], logs / "worker.log"),
        Program("beat", [celery, "-A", "worker", "beat", "--loglevel=INFO"], logs / "beat.log"),
        Program("web", web, logs / "web.log"),
    ]


def listening(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
    except OSError:
        return False
    return True


def ports_taken(*, host: str, port: int, facility_port: int) -> list[str]:
    """What already listens where the stack is about to: a second `make up`, or another service. Said
    before anything starts, since a program that cannot bind would die, be restarted and be given up."""
    taken = []
    if listening(host, port):
        taken.append(f"port {port} on {host} is in use by another program: start with `make up PORT=<free port>`")
    if listening("127.0.0.1", facility_port):
        taken.append(
            f"port {facility_port} (the demo's facility service) is in use by another program: "
            "set KILN_DEMO_FACILITY_PORT to a free port (in the environment or .env)"
        )
    return taken


def announce(supervisor: Supervisor, *, host: str, port: int, logs: Path) -> None:
    """Once the web server answers: queue the demo's heat soak, then print where everything is.
    Returns early when a stop or a give-up comes first (the supervisor then says why)."""
    if not supervisor.wait_until(lambda: listening(host, port), PORT_WAIT_S):
        if supervisor.stop_requested or supervisor.gave_up:
            return
        print(f"(the web server does not answer on {host}:{port} yet; see {logs / 'web.log'})")
    python = str(BIN / "python")
    soak = supervisor.run_step([python, "manage.py", "kiln_demo", "--soak"])
    if soak is None:
        return
    if soak != 0:
        print("(the demo heat soak was not queued; see above)")
    url = f"http://{host}:{port}"
    print(f"\nKiln is running at {url}/", flush=True)
    if supervisor.run_step([python, "manage.py", "kiln_admin"]) is None:
        return
    print(f"The demo cluster is at {url}/clusters/demo/ (start a run with 'Start a run').")
    print(f"Capacity (power and cooling): {url}/clusters/demo/capacity/ once the demo heat soak is done.", flush=True)
    # How Prometheus scrapes this Kiln: the token, a curl line, a scrape config.
    if supervisor.run_step(["bash", "scripts/metrics_hint.sh", host, str(port)]) is None:
        return
    print(
        f"Logs: {logs}/{{web,worker,beat,facility}}.log (appended across restarts; a program that dies is "
        "named here and restarted). Press Ctrl-C to stop.",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make up", description="Start the demo stack and keep it running.")
    parser.add_argument("host", nargs="?", default="127.0.0.1")
    parser.add_argument("port", nargs="?", type=int, default=8000)
    args = parser.parse_args(argv)
    host, port = args.host, args.port
    # The demo's simulated nodes run on the local transport (commands on this host), which Kiln
    # refuses unless the server allows it (docs/security.md). `make up` is the single-host demo.
    os.environ.setdefault("KILN_ALLOW_LOCAL_TRANSPORT", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    from django.conf import settings  # the data folder as the settings see it: environment, .env, ./data

    data_dir = Path(settings.DATA_DIR)
    taken = ports_taken(host=host, port=port, facility_port=settings.KILN_DEMO_FACILITY_PORT)
    for problem in taken:
        print(f"make up: {problem}", file=sys.stderr)
    if taken:
        return 1
    supervisor = Supervisor(
        programs(data_dir=data_dir, host=host, port=port, facility_port=settings.KILN_DEMO_FACILITY_PORT)
    )
    with supervisor.signals_stop():
        try:
            supervisor.start()
            announce(supervisor, host=host, port=port, logs=data_dir / "logs")
            return supervisor.serve()
        finally:
            supervisor.stop()  # after an unexpected error too: nothing is left running (a no-op after serve)


if __name__ == "__main__":
    sys.exit(main())
