"""The lock is complete, and the check that says so fails on a lock that is not: `make install`
installs it without resolving (--no-deps), so only scripts/check_lock.py stands between a lock that
misses a package (an extra's, say) and a broken environment."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import REPO

LOCK = REPO / "requirements" / "dev.txt"
BUILD_IN = REPO / "requirements" / "build.in"
ROOTS = ["--pyproject", str(REPO / "pyproject.toml"), "--extra", "dev", "--also", str(BUILD_IN)]


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_lock", REPO / "scripts" / "check_lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_lock", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _entry(text: str, name: str) -> str:
    """One package's whole entry in the lock (its pin line, hashes and `# via` comments)."""
    match = re.search(rf"^{re.escape(name)}==.*?(?=^[A-Za-z0-9]|\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"{name} is not in the lock"
    return match.group(0)


def _check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    lock = tmp_path / "lock.txt"
    lock.write_text(text)
    code = _checker().main([str(lock), *ROOTS])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_it_finds_the_project_lock_complete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _check(tmp_path, LOCK.read_text(), capsys)
    assert code == 0, out
    assert "complete (" in out


def test_it_fails_when_an_extras_package_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # WeasyPrint asks for fonttools[woff]; the woff extra needs brotli (on CPython) and zopfli.
    text = LOCK.read_text()
    code, out = _check(tmp_path, text.replace(_entry(text, "brotli"), ""), capsys)
    assert code == 1
    assert re.search(r"brotli.*\(asked by fonttools\[woff\]\): brotli is not in the lock", out), out


def test_it_fails_on_an_unpinned_extra(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # What an old pip saw in a resolved install: the extra with a range, not a pin.
    text = LOCK.read_text()
    unpinned = text.replace(_entry(text, "fonttools"), "fonttools[woff]>=4.59.2\n")
    code, out = _check(tmp_path, unpinned, capsys)
    assert code == 1
    assert "'fonttools[woff]>=4.59.2' is not pinned with == to one version" in out
    assert "fonttools is not in the lock" in out


def test_it_fails_on_a_pin_without_hashes_or_with_an_extra(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = LOCK.read_text()
    entry = _entry(text, "fonttools")
    version = re.match(r"fonttools==(\S+)", entry)
    assert version
    code, out = _check(tmp_path, text.replace(entry, f"fonttools[woff]=={version.group(1)}\n"), capsys)
    assert code == 1
    assert "has no --hash" in out
    assert "names extras ['woff']" in out


def test_it_fails_when_the_installed_version_is_not_the_locked_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = LOCK.read_text()
    entry = _entry(text, "fonttools")
    pinned = re.match(r"fonttools==(\S+)", entry)
    assert pinned
    code, out = _check(tmp_path, text.replace(f"fonttools=={pinned.group(1)}", "fonttools==1.0"), capsys)
    assert code == 1
    assert f"installed {pinned.group(1)}, the lock pins 1.0" in out


def test_it_runs_as_a_script_and_exits_non_zero_on_an_incomplete_lock(tmp_path: Path) -> None:
    text = LOCK.read_text()
    lock = tmp_path / "lock.txt"
    lock.write_text(text.replace(_entry(text, "zopfli"), ""))
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "check_lock.py"), str(lock), *ROOTS],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "zopfli" in done.stderr and "asked by fonttools[woff]" in done.stderr
