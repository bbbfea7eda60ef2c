"""The `kiln` command (portal/cli/main.py): help from any directory without an activated
virtualenv, forwarding to the management commands, and the servers' argv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from portal.cli import main as cli
from tests.conftest import REPO

KILN = Path(sys.executable).parent / "kiln"


def kiln_script(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user's shell would start it: no VIRTUAL_ENV, no venv on
    PATH, from an unrelated directory. PYTHONPATH points at this checkout because the shared
    virtualenv may be an editable install of another one (worktrees); the fresh-venv integration
    test (tests/integration/test_kiln_install.py) runs a script installed from this checkout alone."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "KILN_DATA_DIR": str(cwd / "data")}
    return subprocess.run([str(KILN), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--help"], "usage: kiln [-h] [--version] SUB ..."),
        (["--version"], "kiln 0.1.0"),
        (["run", "--help"], "usage: kiln run [-h] [--nodes NODES] [--wait] [--json]"),
        (["user", "--help"], "{add,list,set-role,set,disable,enable}"),
        (["user", "add", "--help"], "--role {viewer,operator,approver}"),
        (["nodes", "--help"], "usage: kiln nodes"),
        (["worker", "--help"], "--queue QUEUE, -Q QUEUE"),
        (["web", "--help"], "--bind BIND"),
        (["init", "--help"], "--no-keys"),
        (["manage", "help"], "Type 'kiln manage help <subcommand>' for help on a specific subcommand."),
    ],
)
def test_it_answers_help_from_any_directory_without_an_activated_virtualenv(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    assert KILN.exists(), f"no console script next to {sys.executable}: pip install -e . makes it"
    done = kiln_script(args, tmp_path)
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout
    assert not (tmp_path / "data").exists()  # help writes nothing


def test_it_lists_every_sub_command_in_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for sub in [*cli.FORWARDED, "worker", "beat", "web", "init", "manage"]:
        assert f"    {sub} " in out, sub


# --- forwarding ---------------------------------------------------------------------------------


@pytest.fixture
def forwarded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(cli, "run_management_command", lambda command, argv: calls.append((command, argv)))
    return calls


@pytest.mark.parametrize(
    ("args", "command", "argv"),
    [
        (["run", "demo", "quick", "--nodes", "demo[01-02]", "--wait", "--json"], "kiln_run",
         ["kiln", "run", "demo", "quick", "--nodes", "demo[01-02]", "--wait", "--json"]),
        (["cancel", "7"], "kiln_cancel", ["kiln", "cancel", "7"]),
        (["nodes", "import", "c1", "inv.yaml", "--format", "yaml"], "kiln_nodes",
         ["kiln", "nodes", "import", "c1", "inv.yaml", "--format", "yaml"]),
        (["user", "add", "alice", "--role", "operator"], "kiln_user",
         ["kiln", "user", "add", "alice", "--role", "operator"]),
        (["user", "token", "alice", "--name", "ci", "--list"], "kiln_token",
         ["kiln", "user token", "alice", "--name", "ci", "--list"]),
        (["user", "token", "alice", "--revoke", "kiln_ab12"], "kiln_token",
         ["kiln", "user token", "alice", "--revoke", "kiln_ab12"]),
        (["verify", "c.pdf", "--help"], "kiln_verify", ["kiln", "verify", "c.pdf", "--help"]),
    ],
)  # fmt: skip
def test_it_forwards_every_argument_to_the_management_command(
    forwarded: list[tuple[str, list[str]]], args: list[str], command: str, argv: list[str]
) -> None:
    assert cli.main(args) == 0
    assert forwarded == [(command, argv)]


def test_it_keeps_the_commands_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    def exits(command: str, argv: list[str]) -> None:
        raise SystemExit(2)  # kiln_run --wait: something errored

    monkeypatch.setattr(cli, "run_management_command", exits)
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "demo", "quick", "--wait"])
    assert exited.value.code == 2


def test_it_says_so_when_a_command_is_not_installed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.run_management_command("kiln_no_such_thing", ["kiln", "x"])
    assert exited.value.code == 2
    assert "this installation has no `kiln_no_such_thing` command" in capsys.readouterr().err


def test_it_shows_a_command_error_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["user", "--skip-checks", "add", "bob", "--role", "operator", "--side", "vendor"])
    assert exited.value.code == 1
    assert capsys.readouterr().err.strip() == (
        "CommandError: --side only applies to approvers: the side is the organisation whose signature an approver gives"
    )


def test_it_refuses_an_unknown_role_with_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["user", "add", "bob", "--role", "admin"])
    assert exited.value.code == 2
    assert "invalid choice: 'admin' (choose from 'viewer', 'operator', 'approver')" in capsys.readouterr().err


# --- servers and init ---------------------------------------------------------------------------


@pytest.fixture
def execs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []

    def execv(path: str, argv: list[str]) -> None:
        assert path == argv[0]
        calls.append(argv)

    monkeypatch.setattr(os, "execv", execv)
    return calls


def test_it_execs_a_worker_on_the_queues_given(execs: list[list[str]]) -> None:
    cli.main(["worker", "--queue", "a", "--queue", "b", "-Q", "a", "--concurrency", "8", "--", "--pool=prefork"])
    assert execs == [
        [sys.executable, "-m", "celery", "-A", "worker", "worker", "--loglevel=INFO", "-Q", "a,b",
         "--concurrency=8", "--pool=prefork"]
    ]  # fmt: skip


def test_it_execs_a_worker_on_the_default_queue(execs: list[list[str]]) -> None:
    cli.main(["worker"])
    assert execs == [[sys.executable, "-m", "celery", "-A", "worker", "worker", "--loglevel=INFO", "-Q", "default"]]


def test_tasks_go_to_the_queue_a_plain_worker_serves() -> None:
    from worker.celery import app

    assert app.conf.task_default_queue == cli.DEFAULT_QUEUE == "default"


@pytest.mark.parametrize(
    "args",
    [
        ["worker", "--queue", "a,b"],  # one -Q word: a comma would name two queues
        ["worker", "--queue", "-x"],
        # The cluster's queue field refuses these, so a worker serving them serves no cluster; and
        # `celery`/`unacked` are Celery's and Kombu's own keys in the broker.
        ["worker", "--queue", "site:a"],
        ["worker", "--queue", "celery"],
        ["worker", "--queue", "unacked_index"],
        ["worker", "--concurrency", "0"],
        ["web", "--bind", "8000"],
        ["web", "--bind", "localhost:http"],
        ["web", "--workers", "-1"],
    ],
)
def test_it_refuses_bad_server_options(execs: list[list[str]], args: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(args)
    assert exited.value.code == 2 and execs == []


def test_it_execs_gunicorn_and_beat(execs: list[list[str]]) -> None:
    cli.main(["web", "--bind", "0.0.0.0:8080", "--workers", "4"])
    cli.main(["web"])
    cli.main(["beat"])
    assert execs == [
        [sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8080", "--workers", "4",
         "--threads", "4", "--access-logfile", "-"],
        [sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind", "127.0.0.1:8000", "--workers", "2",
         "--threads", "4", "--access-logfile", "-"],
        [sys.executable, "-m", "celery", "-A", "worker", "beat", "--loglevel=INFO"],
    ]  # fmt: skip


def test_init_runs_what_make_up_runs_before_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        ran.append(argv)
        return subprocess.CompletedProcess(argv, 3 if "collectstatic" in argv else 0)

    monkeypatch.setattr(subprocess, "run", run)
    prefix = [sys.executable, "-m", "portal.cli", "manage"]

    assert cli.main(["init", "--site", "ACME Lab"]) == 3  # collectstatic failed: stops there
    assert ran == [
        [*prefix, "kiln_init"],
        [*prefix, "migrate", "--noinput", "-v0"],
        [*prefix, "collectstatic", "--noinput", "-v0"],
    ]
    assert cli.init_steps(site="ACME Lab", keys=True)[-1] == [
        "kiln_keys", "init", "--if-missing", "--site", "ACME Lab"
    ]  # fmt: skip
    assert cli.init_steps(site="", keys=True)[-1] == ["kiln_keys", "init", "--if-missing"]
    assert all(step[0] != "kiln_keys" for step in cli.init_steps(site="", keys=False))


def _leaving(code: str) -> subprocess.CompletedProcess[str]:
    script = (
        "import atexit, sys\n"
        "from portal.cli.main import leave\n"
        "atexit.register(lambda: print('atexit ran', end=''))\n"
        "print('buffered ', end='')\n"  # still in stdout's buffer when leave() is called (a pipe)
        f"leave({code})\n"
        "print('never')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("code", "status", "err"), [("3", 3, ""), ("None", 0, ""), ("'no cluster'", 1, "no cluster\n")]
)
def test_leaving_runs_the_exit_handlers_and_flushes_then_ends_with_the_code(code: str, status: int, err: str) -> None:
    left = _leaving(code)
    assert (left.returncode, left.stdout, left.stderr) == (status, "buffered atexit ran", err)


def test_the_command_line_ends_through_leave_with_the_commands_exit_code() -> None:
    """`python -m portal.cli` (main() with no argv): an unknown option is argparse's exit 2, and the
    process ends there, its usage message on stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "portal.cli", "--no-such-option"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "usage: kiln" in proc.stderr


def test_starting_a_run_loads_neither_the_ssh_transport_nor_the_certificate_services() -> None:
    """What `kiln run` loads: Django set up, its command and the services that start a run. The SSH
    transport (fabric, paramiko), the reaper and the issuing services (cryptography's PDF signing)
    are the worker's; importing them cost every `kiln run --wait` ~0.2 s of its start."""
    script = (
        "import sys, django\n"
        "django.setup()\n"
        "from django.core.management import load_command_class\n"
        "load_command_class('portal.execution', 'kiln_run')\n"
        "from portal.runs import services\n"
        "heavy = ('paramiko', 'fabric', 'worker.ssh', 'portal.execution.reaper', 'portal.certificates.services')\n"
        "print(' '.join(sorted(name for name in heavy if name in sys.modules)))\n"
    )
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "portal.settings"}
    argv = [sys.executable, "-c", script]
    loaded = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert (loaded.returncode, loaded.stdout.strip()) == (0, ""), loaded.stderr[-2000:]
