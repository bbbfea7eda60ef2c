"""`make test` runs two pytest processes and relies on pytest-xdist's `--dist loadgroup` to keep the
shared-service tests in one process, in order (tests/conftest.py). pytest 9 with xdist 3.8 silently
stopped grouping (the group went into node ids that pytest no longer reads); this test fails when
an upgrade breaks it again. It runs the same pattern as tests/conftest.py: marks added by a
`tryfirst` collection hook."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CONFTEST = """
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "shared" in item.name:
            item.add_marker(pytest.mark.xdist_group("services"))
"""
TESTS = "import time\n" + "".join(
    f"def test_{name}_{i}():\n    time.sleep(0.2)\n" for name in ("shared", "alone") for i in range(4)
)


def test_hook_marked_tests_run_in_one_process(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_groups.py").write_text(TESTS)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:django", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadgroup", "-v", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    workers = re.findall(r"\[(gw\d)\] .*PASSED .*::test_(shared|alone)_\d", run.stdout)
    shared = {worker for worker, name in workers if name == "shared"}
    assert len(workers) == 8, run.stdout
    assert len(shared) == 1, f"the shared-service tests ran on {sorted(shared)}:\n{run.stdout}"
