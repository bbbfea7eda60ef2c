"""The same immutability tests against SQLite, the embedded default (`make up`): its triggers are
separate SQL (RAISE(ABORT)), and SQLite drops a table's triggers whenever a migration rebuilds it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_the_immutability_tests_pass_on_sqlite(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env["KILN_DATA_DIR"] = str(tmp_path / "data")
    made = subprocess.run(  # the data folder and secret key, as `make up` makes them first
        [sys.executable, "manage.py", "kiln_init"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert made.returncode == 0, made.stdout + made.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/certificates/test_immutability.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout
