"""The simulator's C parts are compiled once per user and copied into every simulator after."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import testbed.sim as sim


def test_a_second_build_copies_the_compiled_parts_without_the_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sim.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    first = sim.build_simulator(tmp_path / "one")
    cache = tmp_path / "tmp" / f"kiln-sim-build-{os.getuid()}"
    assert len(list(cache.iterdir())) == 2

    def no_compiler(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        raise AssertionError("compiled again")

    monkeypatch.setattr(sim.subprocess, "run", no_compiler)
    second = sim.build_simulator(tmp_path / "two")
    for a, b in (
        (first.lib_dir / sim.LIB_NAME, second.lib_dir / sim.LIB_NAME),
        (first.bin_dir / sim.IPMITOOL_NAME, second.bin_dir / sim.IPMITOOL_NAME),
    ):
        assert a.read_bytes() == b.read_bytes() and os.access(b, os.X_OK)


def test_a_cache_folder_others_could_write_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sim.tempfile, "gettempdir", lambda: str(tmp_path))
    folder = tmp_path / f"kiln-sim-build-{os.getuid()}"
    folder.mkdir()
    folder.chmod(0o777)
    assert sim._build_cache() is None
    folder.chmod(0o700)
    assert sim._build_cache() == folder
