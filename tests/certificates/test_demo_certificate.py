"""`kiln_demo --certificate OUT.pdf` then `kiln_verify OUT.pdf` on a fresh embedded install, as a new
user would type them (separate processes, SQLite, no worker), and pdfsig on the same file: three
tries at once beside a CPU hog (a laptop busy with other work), each a complete demo acceptance run on
an install of its own, heat soak included, and a certificate."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.load import busy_loops

# Loads every core while the demo's simulated nodes run: the machine alone (tests/conftest.py).
pytestmark = [pytest.mark.integration, pytest.mark.exclusive("demo", "cpu")]


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


def _check_certificate(made: subprocess.CompletedProcess[str], out: Path, env: dict[str, str]) -> None:
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    assert "PASS WITH WAIVERS" in made.stdout and out.exists()
    # What the demo is for: the demo acceptance run triages to exactly the two demo faults.
    after = made.stdout.split("triage of run #", 1)[1].splitlines()[1:]
    triage = list(itertools.takewhile(lambda line: line.startswith(("FAIL ", "ERROR ")), after))
    assert len(triage) == 2, made.stdout
    ecc, driver = triage
    assert ecc.startswith("FAIL demo03 (1 node) | ECC and Xid | GPUs: demo03 GPU 5 serial 16549220"), ecc
    assert "RMA" in ecc and "ecc_volatile_uncorrected <= 0" in ecc and "PCI 00000000:" in ecc, ecc
    assert driver.startswith("FAIL demo06 (1 node) | GPU inventory, Software and firmware |"), driver
    assert "535.104.05" in driver and "550.54.15" in driver and "reinstall the pinned driver" in driver

    verified = _manage("kiln_verify", str(out), env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "VALID" in verified.stdout and "not revoked" in verified.stdout

    pdfsig = subprocess.run(["pdfsig", str(out)], capture_output=True, text=True, check=False).stdout
    assert "Total document signed" in pdfsig and "Signature is Valid" in pdfsig, pdfsig

    text = subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True, check=True).stdout
    assert "demo06" in text and "re-imaging" in text, "the out-of-scope node and its reason"
    assert "demo03" in text and "RMA" in text, "the waived node and its justification"
    assert "Vera Vendor" in text and "Carl Customer" in text
    assert "Power and cooling" in text, "the demo acceptance's heat soak is certified"


# Three tries, each on an install of its own (its own data folder, facility port and loopback /24 for
# the simulated nodes), all at once: each try runs beside the other two and the busy loops, which top
# the machine up to two runnable processes per core. At once rather than in a row: the busy loops
# then add little to what the three demos load, where in a row they doubled the test's CPU (654 s of
# CPU in 550 s, in a three-process CI run). One demo took 128 s alone and 335 s beside the hog on a
# 2-core machine that others loaded too (charts included).
TRIES = 3
FIRST_LOOPBACK = 11  # 127.0.11.0/24 and up: clear of a `make up` demo on this host (127.0.0.0/24)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _install(root: Path, attempt: int) -> dict[str, str]:
    """A fresh embedded install (kiln_init, migrate; as `make up` does first) of its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.pop("KILN_ALLOW_LOCAL_TRANSPORT", None)  # the demo command allows its own simulators
    env["KILN_DATA_DIR"] = str(root / f"data-{attempt}")
    env["KILN_DEMO_FACILITY_PORT"] = str(_free_port())
    env["KILN_DEMO_LOOPBACK"] = f"127.0.{FIRST_LOOPBACK + attempt}"
    assert _manage("kiln_init", env=env).returncode == 0
    assert _manage("migrate", "--noinput", "-v0", env=env).returncode == 0
    return env


class _Demo:
    """`kiln_demo --certificate OUT` in the background; its output goes to files beside OUT (pipes
    that nobody reads while the others run could fill and stall it)."""

    def __init__(self, env: dict[str, str], out: Path, *, charts: bool) -> None:
        self.env, self.out = env, out
        self.logs = out.with_suffix(".stdout"), out.with_suffix(".stderr")
        with self.logs[0].open("w") as stdout, self.logs[1].open("w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "kiln_demo", "--certificate", str(out)], cwd=REPO,
                env={**env, "KILN_CERT_CHARTS": "1" if charts else "0"}, stdout=stdout, stderr=stderr,
            )  # fmt: skip

    def wait(self, timeout: float) -> subprocess.CompletedProcess[str]:
        self.proc.wait(timeout=timeout)
        stdout, stderr = (log.read_text() for log in self.logs)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, stdout, stderr)


@pytest.mark.timeout(1800)
def test_the_demo_certificate_verifies_three_times_beside_a_cpu_hog(tmp_path: Path) -> None:
    installs = [_install(tmp_path, attempt) for attempt in range(1, TRIES + 1)]
    # Busy loops beside the demos: what made the demo fail on a loaded laptop (its simulated BMC
    # readings starved, the heat soak short of readings).
    with busy_loops() as hogs:
        # The certificate's charts (a headless Chromium) once: rendering them is not what the load
        # threatens, and takes a minute or more beside it.
        demos: list[_Demo] = []
        try:
            for attempt, env in enumerate(installs, start=1):
                demos.append(_Demo(env, tmp_path / f"demo-{attempt}.pdf", charts=attempt == 1))
            finished = [demo.wait(timeout=1200) for demo in demos]
        finally:
            for demo in demos:
                demo.proc.kill()
    for attempt, (demo, made) in enumerate(zip(demos, finished, strict=True), start=1):
        try:
            _check_certificate(made, demo.out, demo.env)
        except AssertionError as exc:
            raise AssertionError(f"try {attempt} of {TRIES}, at once, beside {hogs} busy loops: {exc}") from exc
