"""Under CI (CI=true) a skipped test fails the run: a skip there means a prerequisite the CI machine
must have is missing, and a green run that silently tested less is worse than a red one.

Loaded by tests/conftest.py; a subprocess test loads it with `-p tests.ci_guard`."""

from __future__ import annotations

import os
from typing import Any

import pytest


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _skipped(session: pytest.Session) -> list[str]:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return []
    return [report.nodeid or str(report.location) for report in reporter.stats.get("skipped", [])]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _in_ci() and exitstatus == 0 and _skipped(session):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    if _in_ci() and skipped:
        terminalreporter.write_sep("=", f"CI=true: {len(skipped)} skipped test(s) fail this run", red=True)
        for report in skipped:
            terminalreporter.write_line(f"SKIPPED {report.nodeid}: {report.longrepr[-1] if report.longrepr else ''}")
