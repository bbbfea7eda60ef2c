"""Pytest fixtures for the testbed. Register with ``pytest_plugins = ["testbed.pytest_plugin"]``.

- ``testbed_factory`` (session): ``make(size, name=...) -> Testbed``; every testbed it made is torn down
  at session end.
- ``testbed`` (session): one shared 8-node testbed.
- ``clean_testbed`` (function): the shared testbed, reset before and after the test (faults cleared,
  stopped sshds started, rotated host keys restored). Use it in tests that inject faults.
- ``testbed_available`` (function): for tests that build a ``Testbed`` themselves.

Without root or ``ip netns``/sshd these fixtures skip the test, except under ``CI=true``, where they
fail it: CI must never silently skip the testbed tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.cluster import SSHD, Testbed, TestbedError

SHARED_SIZE = 8


def testbed_unavailable_reason() -> str | None:
    """Why testbeds cannot run on this machine, or None when they can."""
    if os.geteuid() != 0:
        return "testbed needs root (network namespaces + sshd)"
    for tool in ("ip", "unshare", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"testbed needs {tool} on PATH"
    if not SSHD.exists():
        return f"testbed needs {SSHD} (apt-get install openssh-server)"
    try:
        proc = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"'ip netns' is unavailable: {exc}"
    if proc.returncode != 0:
        return f"'ip netns' is unavailable: {proc.stderr.strip()}"
    return None


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and the testbed cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


class TestbedFactory:
    """Makes testbeds with names and subnets unique to this process; downs them all on close()."""

    __test__ = False

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.testbeds: list[Testbed] = []
        self._counter = 0

    def _unique_name(self, prefix: str) -> str:
        # Short (interface names are <= 15 chars) and unique among live processes: prefix + pid + counter.
        self._counter += 1
        pid = _base36(os.getpid() % 36**4)
        return f"{prefix[:2]}{pid}{_base36(self._counter)}"[:8]

    def __call__(self, size: int, name: str = "kt", subnet_octet: int | None = None) -> Testbed:
        reason = testbed_unavailable_reason()
        if reason:
            _skip_or_fail(reason)
        unique = self._unique_name(name)
        tb = Testbed(size, self.base_dir / unique, name=unique, subnet_octet=subnet_octet)
        self.testbeds.append(tb)
        try:
            return tb.up()
        except TestbedError as exc:
            pytest.fail(f"testbed up failed: {exc}", pytrace=False)

    def close(self) -> None:
        errors = []
        for tb in reversed(self.testbeds):
            try:
                tb.down()
            except TestbedError as exc:
                errors.append(str(exc))
        self.testbeds.clear()
        if errors:
            raise TestbedError("tearing down testbeds failed:\n" + "\n".join(errors))


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


@pytest.fixture
def testbed_available() -> None:
    """For tests that build a Testbed themselves: skip (or, under CI=true, fail) when they cannot."""
    reason = testbed_unavailable_reason()
    if reason:
        _skip_or_fail(reason)


@pytest.fixture(scope="session")
def testbed_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Testbed]]:
    factory = TestbedFactory(tmp_path_factory.mktemp("testbeds"))
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="session")
def testbed(testbed_factory: TestbedFactory) -> Testbed:
    return testbed_factory(SHARED_SIZE, name="kb")


@pytest.fixture
def clean_testbed(testbed: Testbed) -> Iterator[Testbed]:
    testbed.reset()
    yield testbed
    testbed.reset()
