"""One configuration layer: settings read the environment once and write nothing at import;
`manage.py kiln_init` makes the data folder and the secret key."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from portal import datadir
from tests.conftest import REPO


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "DJANGO_", "DATABASE_", "CELERY_"))}
    return {**env, "KILN_DATA_DIR": str(data_dir), **extra}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_importing_the_settings_and_setting_up_django_writes_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    code = "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'portal.settings'; django.setup(); print('ok')"
    result = _run(["-c", code], _env(data_dir))
    assert result.returncode == 0, result.stderr
    assert not data_dir.exists() and list(tmp_path.iterdir()) == []


def test_without_a_key_the_system_checks_say_to_run_kiln_init(tmp_path: Path) -> None:
    result = _run(["manage.py", "check"], _env(tmp_path / "data"))
    assert result.returncode != 0
    assert "kiln.E001" in result.stderr and "kiln_init" in result.stderr


def test_kiln_init_makes_the_folders_and_a_private_key_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = _run(["manage.py", "kiln_init"], _env(data_dir))
    assert first.returncode == 0, first.stderr
    for folder in datadir.layout(data_dir):
        assert folder.is_dir(), folder
    key_file = data_dir / "secret_key"
    key = key_file.read_text()
    assert len(key) >= 50 and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    again = _run(["manage.py", "kiln_init"], _env(data_dir))
    assert again.returncode == 0 and "already set up" in again.stdout
    assert key_file.read_text() == key  # never replaced: sessions and signatures stay valid
    assert [p.name for p in data_dir.iterdir() if p.name.startswith(".secret_key")] == []  # no temporaries left
    checked = _run(["manage.py", "check"], _env(data_dir))
    assert checked.returncode == 0, checked.stderr


def test_kiln_init_makes_no_key_file_when_the_key_comes_from_the_environment(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    result = _run(["manage.py", "kiln_init"], _env(data_dir, KILN_SECRET_KEY="k" * 50))
    assert result.returncode == 0, result.stderr
    assert (data_dir / "broker" / "queue").is_dir() and not (data_dir / "secret_key").exists()


def test_a_key_linked_first_by_another_process_is_kept(tmp_path: Path) -> None:
    (tmp_path / "secret_key").write_text("theirs")
    assert datadir.secret_key_create(tmp_path) is False
    assert datadir.secret_key_read(tmp_path) == "theirs"
    assert datadir.secret_key_read(tmp_path / "missing") == ""


def test_apps_read_django_settings_not_the_environment() -> None:
    """os.environ outside settings.py only where a comment in the same file says why (code that runs
    before Django or without it, and environments handed on to child processes)."""
    allowed = {
        "portal/settings.py",
        "portal/wsgi.py",  # DJANGO_SETTINGS_MODULE, before Django
        "portal/cli/main.py",  # the `kiln` command: DJANGO_SETTINGS_MODULE, before Django
        "portal/demo/up.py",  # `make up`: DJANGO_SETTINGS_MODULE and the demo's local transport, before Django
        "portal/certificates/sandbox.py",  # the child's limits, set before Django loads
        "portal/certificates/charts.py",  # kaleido finds Chromium through the environment
        "worker/celery.py",  # DJANGO_SETTINGS_MODULE, before Django
        "worker/ssh.py",  # transport layer, also used without Django
        "worker/transport.py",  # the output cap: transport layer, also used without Django
        "worker/local.py",  # a local command's environment
        "worker/keepalive.py",  # transport layer, also used without Django
    }
    found = set()
    for package in ("portal", "worker", "checks"):
        for path in (REPO / package).rglob("*.py"):
            rel = path.relative_to(REPO).as_posix()
            if "/management/commands/" not in rel and re.search(r"os\.environ|os\.getenv", path.read_text()):
                found.add(rel)
    assert found <= allowed, sorted(found - allowed)


_PRINT_SETTINGS = (
    "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'portal.settings'; django.setup(); "
    "from django.conf import settings; print(settings.TIME_ZONE, settings.KILN_MAX_NODESET, settings.DATA_DIR)"
)


def _settings_in(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); {_PRINT_SETTINGS}"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_settings_read_dot_env_in_the_working_directory_without_overriding_the_environment(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        "# a comment\nKILN_TIME_ZONE=Europe/Paris\nKILN_MAX_NODESET=123\nKILN_DATA_DIR=/tmp/from-dot-env\n"
    )
    env = {k: v for k, v in _env(tmp_path / "data").items() if k != "KILN_DATA_DIR"}
    read = _settings_in(tmp_path, env)
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["Europe/Paris", "123", "/tmp/from-dot-env"]
    # The environment wins over .env.
    overridden = _settings_in(tmp_path, {**env, "KILN_TIME_ZONE": "UTC"})
    assert overridden.stdout.split()[0] == "UTC", overridden.stderr


def test_an_empty_kiln_env_file_reads_no_dot_env_and_a_missing_named_one_is_an_error(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("KILN_TIME_ZONE=Europe/Paris\n")
    env = _env(tmp_path / "data")
    ignored = _settings_in(tmp_path, {**env, "KILN_ENV_FILE": ""})
    assert ignored.stdout.split()[0] == "UTC", ignored.stderr
    named = tmp_path / "site.env"
    named.write_text("KILN_TIME_ZONE=Asia/Tokyo\n")
    chosen = _settings_in(REPO, {**env, "KILN_ENV_FILE": str(named)})
    assert chosen.stdout.split()[0] == "Asia/Tokyo", chosen.stderr
    missing = _settings_in(tmp_path, {**env, "KILN_ENV_FILE": str(tmp_path / "nope.env")})
    assert missing.returncode != 0 and "nope.env does not exist" in missing.stderr


def test_the_embedded_broker_sends_a_task_without_kombus_no_hostname_warning(tmp_path: Path) -> None:
    """Every `kiln_run` on the embedded default used to print kombu's "No hostname was supplied.
    Reverting to default 'localhost'" when it sent the run's tasks (kombu logs it for a broker URL
    without a host). This sends a run task as run_start does, in a process of its own."""
    from portal.execution.broker import pending_in_folder

    data_dir = tmp_path / "data"
    assert _run(["manage.py", "kiln_init"], _env(data_dir)).returncode == 0
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'portal.settings'; django.setup()\n"
        "from worker.celery import app; app.send_task('kiln.run_node', args=(1, 2))"
    )
    sent = _run(["-c", code], _env(data_dir))
    assert sent.returncode == 0, sent.stderr
    assert "hostname" not in sent.stderr, sent.stderr
    queue, _ = datadir.broker_dirs(data_dir)
    assert pending_in_folder(queue) == {("kiln.run_node", (1, 2))}  # it was sent, to the embedded broker


def test_the_broker_restore_pace_is_kombus_own_unless_set(tmp_path: Path) -> None:
    code = (
        "import json, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'portal.settings'; "
        "from django.conf import settings; print(json.dumps(settings.CELERY_BROKER_TRANSPORT_OPTIONS))"
    )
    broker = {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/15", "KILN_SECRET_KEY": "settings-test-key"}
    options = {}
    for restore in ("", "3"):
        result = _run(["-c", code], _env(tmp_path / "data", **broker, KILN_BROKER_RESTORE_S=restore))
        assert result.returncode == 0, result.stderr
        options[restore] = result.stdout.strip()
    assert options[""] == '{"visibility_timeout": 90000}'
    assert options["3"] == '{"visibility_timeout": 90000, "unacked_restore_interval": 3, "unacked_restore_throttle": 1}'
