"""The credential key: kiln_init makes it (unless KILN_CREDENTIAL_KEY is set), and the system check
kiln.E101 stops a server that holds sealed credentials but no key that opens them."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.db import DatabaseError

from portal import datadir
from portal.facility import credentials
from portal.facility.apps import credential_key_check
from portal.facility.models import Pdu
from tests.conftest import REPO
from tests.portal.test_settings_layer import _env


def test_no_key_and_no_credential_is_fine(settings, db) -> None:
    settings.KILN_CREDENTIAL_KEY = ""
    assert credential_key_check() == []


def test_no_key_with_a_stored_credential_is_an_error(settings, secret_site) -> None:
    settings.KILN_CREDENTIAL_KEY = ""
    [error] = credential_key_check()
    assert error.id == "kiln.E101" and "endpoint credentials are stored" in error.msg and "kiln_init" in error.hint


# A fixed well-formed key (not generated at collection: xdist's workers must collect the same ids).
GOOD_KEY = "m9nCUqdput9mFdSL0qBcHqyHk9rPZKeF3j1eKiXqE9U="


@pytest.mark.parametrize("key", ["not-a-key", f"{GOOD_KEY},short"])
def test_a_malformed_key_is_an_error_at_once(settings, db, key: str) -> None:
    settings.KILN_CREDENTIAL_KEY = key
    [error] = credential_key_check()
    assert error.id == "kiln.E101" and "not a Fernet key" in error.msg
    assert key not in error.msg  # a key is a secret too


def test_an_unreadable_database_tells_nothing(settings, monkeypatch) -> None:
    """`check --deploy` runs with a database that does not answer: no credential can be counted."""
    settings.KILN_CREDENTIAL_KEY = ""

    def refuse(*args, **kwargs):
        raise DatabaseError("could not translate host name")

    monkeypatch.setattr(Pdu.objects, "exclude", refuse)
    assert credential_key_check() == []


def test_a_good_key_passes(db) -> None:
    assert credentials.key_problem() == "" and credential_key_check() == []


def test_kiln_init_makes_a_private_credential_key_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    run = [sys.executable, "manage.py", "kiln_init"]
    first = subprocess.run(run, cwd=REPO, env=_env(data_dir), capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    key_file = data_dir / datadir.CREDENTIAL_KEY_FILE
    key = key_file.read_text()
    Fernet(key)  # a valid Fernet key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert datadir.credential_key_create(data_dir) is False and key_file.read_text() == key


def test_kiln_init_makes_no_credential_key_when_it_comes_from_the_environment(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = _env(data_dir, KILN_CREDENTIAL_KEY=Fernet.generate_key().decode())
    result = subprocess.run(
        [sys.executable, "manage.py", "kiln_init"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert (data_dir / "secret_key").exists() and not (data_dir / datadir.CREDENTIAL_KEY_FILE).exists()
