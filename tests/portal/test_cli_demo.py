"""`kiln demo` then `kiln run demo quick --inline --json`: the CLI path end to end on the demo's
simulated nodes (the data folder's demo: one process runs this module, tests/conftest.py)."""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path

import pytest
from django.db import connection

from portal.cli.main import main
from portal.runs.models import Run

# The demo's simulated nodes (their loopback addresses and ports, the data folder's demo): one at a time.
pytestmark = pytest.mark.exclusive("demo")


class OneThread(concurrent.futures.ThreadPoolExecutor):
    """SQLite's in-memory test database fails a lock between threads at once (tests/portal/test_commands.py)."""

    def __init__(self, max_workers: int | None = None, **kwargs: object) -> None:
        super().__init__(max_workers=1, **kwargs)  # type: ignore[arg-type]


@pytest.mark.django_db(transaction=True)
def test_kiln_run_inline_prints_json_and_exits_1_on_the_demos_failures(
    settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings.DATA_DIR = tmp_path
    if connection.vendor == "sqlite":
        monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", OneThread)
    assert main(["demo"]) == 0
    assert "created cluster demo with 8 simulated nodes" in capsys.readouterr().out

    with pytest.raises(SystemExit) as exited:
        main(["run", "demo", "quick", "--nodes", "demo[02-03]", "--inline", "--json"])

    assert exited.value.code == 1  # demo03 has uncorrectable ECC errors: fail, not error
    data = json.loads(capsys.readouterr().out)
    assert data["run"] == Run.objects.get().pk and data["status"] == "fail"
    statuses = {(r["node"], r["check"]): r["status"] for r in data["results"]}
    assert {node for node, _ in statuses} == {"demo02", "demo03"}
    assert statuses[("demo03", "ecc-health")] == "fail"
    assert set(statuses.values()) == {"pass", "fail"}
