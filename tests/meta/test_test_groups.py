"""`make test` runs several pytest processes and relies on pytest-xdist's `--dist loadgroup` to keep
the tests that need the machine alone in one process, in order (tests/conftest.py). pytest 9 with xdist 3.8 silently
stopped grouping (the group went into node ids that pytest no longer reads); this test fails when
an upgrade breaks it again. It runs the same pattern as tests/conftest.py: marks added by a
`tryfirst` collection hook."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXCLUSIVE_GROUP, broker_url_of_process, xdist_group_of

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


class FakeItem:
    """What the grouping reads of a test: its marks and its fixtures."""

    def __init__(self, marks: list[pytest.Mark], fixtures: list[str]) -> None:
        self.marks = marks
        self.fixturenames = fixtures

    def iter_markers(self, name: str) -> list[pytest.Mark]:
        return [mark for mark in self.marks if mark.name == name]


def test_only_tests_holding_an_exclusive_resource_are_grouped() -> None:
    exclusive = pytest.mark.exclusive("cpu").mark
    assert xdist_group_of(FakeItem([exclusive], [])) == EXCLUSIVE_GROUP  # type: ignore[arg-type]
    assert xdist_group_of(FakeItem([], ["demo", "client"])) == EXCLUSIVE_GROUP  # type: ignore[arg-type]
    # A worker, the testbed, a live server: each process has its own, so no group.
    per_process = ["celery_worker_process", "testbed_cluster", "live_server", "page"]
    assert xdist_group_of(FakeItem([pytest.mark.integration.mark], per_process)) is None  # type: ignore[arg-type]


def test_each_process_has_its_own_broker_database() -> None:
    assert broker_url_of_process("redis://127.0.0.1:6379/9", "gw0") == "redis://127.0.0.1:6379/9"
    assert broker_url_of_process("redis://127.0.0.1:6379/9", "gw3") == "redis://127.0.0.1:6379/12"
    assert broker_url_of_process("redis://127.0.0.1:6379", "gw1") == "redis://127.0.0.1:6379/1"
    assert broker_url_of_process("redis://127.0.0.1:6379/9", None) == "redis://127.0.0.1:6379/9"
    assert broker_url_of_process("filesystem://localhost/", "gw1") == "filesystem://localhost/"
