"""`kiln_demo --certificate OUT.pdf` then `kiln_verify OUT.pdf` on a fresh embedded install, as a new
user would type them (separate processes, SQLite, no worker), and pdfsig on the same file, beside a
CPU hog (a laptop busy with other work): a complete demo acceptance run, heat soak included, and a
new certificate; KILN_DEMO_TRIES times in a row (`make soak-demo`: 3)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.certificates.demo_cover import assert_page_1_decides
from tests.conftest import REPO
from tests.load import busy_loops

# Loads every core while the demo's simulated nodes run: the machine alone (tests/conftest.py).
pytestmark = [pytest.mark.integration, pytest.mark.exclusive("demo", "cpu")]


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture
def cpu_hog() -> Iterator[int]:
    """Busy loops beside the test: what made the demo fail on a loaded laptop (its simulated BMC
    readings starved, the heat soak short of readings)."""
    with busy_loops() as hogs:
        yield hogs


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
    # Page 1 alone decides: both exceptions with their reasons and the waiver, both signers with their
    # full names and organisations (kiln_verify's VALID above includes page 1's headline check).
    assert_page_1_decides(out.read_bytes(), out.parent)
    assert "Power and cooling" in text, "the demo acceptance's heat soak is certified"


# Tries in a row on one install (KILN_DEMO_TRIES, default 1): `make test` proves the demo beside the
# hog once per run; `make soak-demo` repeats it 3 times in a row (3 of 3 must pass), as the demo's
# reliability was first proven. Each try beside the hog is about a quarter of the whole suite's CPU on
# 2 cores (the busy loops fill what the other test processes leave idle): 3 tries took 550 s and
# 654 s of CPU in one CI run (charts included). One try took 335 s beside the hog on a 2-core machine
# that others loaded too; 1800 s for three.
TRIES = int(os.environ.get("KILN_DEMO_TRIES", "1"))


@pytest.mark.timeout(1800)
def test_the_demo_certificate_verifies_beside_a_cpu_hog(tmp_path: Path, cpu_hog: int) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env["KILN_DATA_DIR"] = str(tmp_path / "data")
    env.pop("KILN_ALLOW_LOCAL_TRANSPORT", None)  # the demo command allows its own simulators
    assert _manage("kiln_init", env=env).returncode == 0  # as `make up` does first
    assert _manage("migrate", "--noinput", "-v0", env=env).returncode == 0
    assert TRIES >= 1, f"KILN_DEMO_TRIES={TRIES}: at least 1"
    for attempt in range(1, TRIES + 1):
        # The same install each time: running the demo again converges the cluster and issues a new
        # certificate from a new campaign.
        out = tmp_path / f"demo-{attempt}.pdf"
        # Without the certificate's charts: rendering them (a headless Chromium) is not what the hog
        # threatens, took a minute or more beside it, and tests/certificates/test_pdf.py and
        # test_power_section.py draw them.
        made = _manage("kiln_demo", "--certificate", str(out), env={**env, "KILN_CERT_CHARTS": "0"})
        try:
            _check_certificate(made, out, env)
        except AssertionError as exc:
            raise AssertionError(f"try {attempt} of {TRIES} beside {cpu_hog} busy loops: {exc}") from exc
