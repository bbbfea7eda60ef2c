"""`kiln`: one command for Kiln, installed by pip as a console script whose shebang is the
virtualenv's python, so nothing needs activating and it works from any directory.

Most sub-commands are Kiln's management commands under a shorter name (`kiln run` is `kiln_run`):
their arguments, `--help` and exit codes are the command's own. The servers (`worker`, `beat`,
`web`) replace this process (exec) so that signals from a terminal or a process manager reach them.
Settings come from the environment (and `.env`), as for `manage.py`.
"""

from __future__ import annotations

import argparse
import atexit
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import NoReturn

from django.core.exceptions import ValidationError

from portal.inventory.queue_names import validate_queue

PROG = "kiln"
SETTINGS = "portal.settings"

# kiln SUB -> (management command, one line for `kiln --help`). Everything after SUB goes to it.
FORWARDED: dict[str, tuple[str, str]] = {
    "run": ("kiln_run", "start a run of a plan on a cluster; --wait exits 0 pass, 1 fail, 2 error"),
    "cancel": ("kiln_cancel", "cancel a run (its running checks are stopped on their nodes)"),
    "cluster": ("kiln_cluster", "create, update (--queue) or list clusters"),
    "nodes": ("kiln_nodes", "add, import or list a cluster's nodes"),
    "verify": ("kiln_verify", "verify a certificate PDF offline"),
    "audit": ("kiln_audit", "`audit verify`: check the audit log's hash chain and revocations; exits 1 if tampered"),
    "demo": ("kiln_demo", "seed or refresh the demo cluster (simulated nodes, no root)"),
    "keys": ("kiln_keys", "the site's certificate-signing keys: init, list, ca, rotate, export-public, import, trust"),
    "admin": ("kiln_admin", "make sure an administrator exists and print the login"),
    "user": (
        "kiln_user",
        "add users (role, side, name, organisation), list them, set-role, set, disable; `user token` for API tokens",
    ),
}
# `kiln user token ...` goes to the REST API's own command.
TOKEN_COMMAND = "kiln_token"
# Commands of an app that an installation may leave out, and what to say when it did.
ABSENT: dict[str, str] = {
    "kiln_demo": "the demo is not part of this installation: it comes with a checkout of Kiln (`make up` starts "
    "it), not with the production image; in a checkout, KILN_DEMO=0 turns it off",
}

# Defaults of the servers, as `make up` (portal/demo/up.py) starts them.
DEFAULT_QUEUE = "default"  # worker/celery.py: task_default_queue
DEFAULT_BIND = "127.0.0.1:8000"  # the Makefile's HOST and PORT
DEFAULT_WEB_WORKERS = 2  # a demo or a small site (`make up` runs this); docker-compose.yml runs 4 on a production host
WEB_THREADS = 4  # as docker-compose.yml (`make up` runs this too)


def version() -> str:
    try:
        return metadata.version("kiln")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


# --- forwarding to management commands ----------------------------------------------------------


def django_setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS)
    import django

    django.setup()


def run_management_command(command: str, argv: list[str]) -> None:
    """Run a management command as `manage.py` would, with argv = [prog, shown name, args...]: its
    parser, --help, errors (`CommandError: ...`, exit 1) and exit codes are its own."""
    django_setup()
    from django.core.management import get_commands, load_command_class

    app = get_commands().get(command)
    if app is None:
        sys.stderr.write(f"{PROG}: {ABSENT.get(command, f'this installation has no `{command}` command')}\n")
        raise SystemExit(2)
    handler = app if not isinstance(app, str) else load_command_class(app, command)
    handler.run_from_argv(argv)


def forward(sub: str, args: Sequence[str]) -> int:
    command, _ = FORWARDED[sub]
    shown = sub
    if sub == "user" and args and args[0] == "token":
        command, shown, args = TOKEN_COMMAND, "user token", args[1:]
    run_management_command(command, [PROG, shown, *args])
    return 0


def manage(args: Sequence[str]) -> int:
    """Any manage.py command: `kiln manage changepassword NAME`, `kiln manage help`."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS)
    from django.core.management import execute_from_command_line

    execute_from_command_line([f"{PROG} manage", *args])
    return 0


# --- servers and set-up -------------------------------------------------------------------------


def queue_name(value: str) -> str:
    """The cluster's `queue` field's rule (portal/inventory/queue_names.py): a name a cluster can carry."""
    try:
        validate_queue(value)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: {'; '.join(exc.messages)}") from None
    return value


def positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number above 0")
    return int(value)


def bind_address(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if value.startswith("unix:") and len(value) > len("unix:"):
        return value
    if not sep or not host or host.startswith("-") or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{value!r}: expected HOST:PORT (e.g. 0.0.0.0:8000) or unix:PATH")
    return value


def worker_argv(*, queues: Sequence[str], concurrency: int | None, loglevel: str, extra: Sequence[str]) -> list[str]:
    argv = [sys.executable, "-m", "celery", "-A", "worker", "worker", f"--loglevel={loglevel}"]
    argv += ["-Q", ",".join(dict.fromkeys(queues or [DEFAULT_QUEUE]))]
    if concurrency is not None:
        argv.append(f"--concurrency={concurrency}")
    return [*argv, *extra]


def beat_argv(*, loglevel: str, extra: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "worker", "beat", f"--loglevel={loglevel}", *extra]


def web_argv(*, bind: str, workers: int, extra: Sequence[str]) -> list[str]:
    return [
        sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind", bind,
        "--workers", str(workers), "--threads", str(WEB_THREADS), "--access-logfile", "-", *extra,
    ]  # fmt: skip


def init_steps(*, site: str, keys: bool) -> list[list[str]]:
    """What `make up` does before it starts anything, each step a management command."""
    steps = [
        ["kiln_init"],
        ["migrate", "--noinput", "-v0"],
        ["collectstatic", "--noinput", "-v0"],
    ]
    if keys:
        steps.append(["kiln_keys", "init", "--if-missing", *(["--site", site] if site else [])])
    return steps


def exec_server(argv: list[str]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
    return 1  # not reached: execv replaces this process or raises


def init(args: argparse.Namespace) -> int:
    # Each step in a process of its own, as `make up` runs them: the settings this process would have
    # read before kiln_init made the secret key would lack it.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS)
    for step in init_steps(site=args.site, keys=args.keys):
        sys.stderr.write(f"{PROG} init: {' '.join(step)}\n")
        done = subprocess.run([sys.executable, "-m", "portal.cli", "manage", *step], check=False)
        if done.returncode:
            sys.stderr.write(f"{PROG} init: `{' '.join(step)}` failed (exit {done.returncode}); stopped there\n")
            return done.returncode
    sys.stderr.write(f"{PROG} init: done; next `{PROG} admin` for a login, then `{PROG} web` and `{PROG} worker`\n")
    return 0


# --- the parser ---------------------------------------------------------------------------------

EPILOG = f"""\
`{PROG} SUB --help` shows a sub-command's own options. Settings come from the environment and a
.env file (see .env.example); the data directory is KILN_DATA_DIR (default: data/ in the project).
`manage.py` still works with the virtualenv's python: `.venv/bin/python manage.py kiln_run ...`.

examples:
  {PROG} init                                   # data folder, keys, database, static files
  {PROG} user add alice --role operator
  {PROG} run demo quick --wait --json
  {PROG} worker --queue default --queue site-a --concurrency 32
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Kiln: accept GPU clusters with evidence, and keep them healthy.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}")
    sub = parser.add_subparsers(dest="sub", metavar="SUB", title="sub-commands")
    for name, (_, text) in FORWARDED.items():
        # Parsed by the management command itself (see main); listed here for --help.
        sub.add_parser(name, help=text, add_help=False)
    _server_parsers(sub)
    init_parser = sub.add_parser("init", help="set up the data folder, database, static files and signing keys")
    init_parser.add_argument(
        "--site", default="", help="organisation/site name in the certificates (default: hostname)"
    )
    init_parser.add_argument(
        "--no-keys", dest="keys", action="store_false", help="skip `kiln keys init` (hosts that share KILN_KEY_DIR)"
    )
    init_parser.set_defaults(func=init)
    sub.add_parser("manage", help="any manage.py command (`kiln manage help` lists them)", add_help=False)
    return parser


def _server_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    extra_help = "further options for the server itself, after `--`"
    worker = sub.add_parser(
        "worker",
        help="a Celery worker that runs checks (execs celery -A worker worker)",
        description="Run a Celery worker: node checks, group checks, certificate issuing. Without "
        "--concurrency it runs the settings' pool (threads, KILN_WORKER_CONCURRENCY node tasks at once).",
    )
    worker.add_argument(
        "--queue", "-Q", action="append", type=queue_name, default=[],
        help=f"a queue to serve (repeat for several; default: {DEFAULT_QUEUE}, where every cluster's tasks go "
        "unless it names a queue of its own)",
    )  # fmt: skip
    worker.add_argument("--concurrency", type=positive, help="tasks at once (default: KILN_WORKER_CONCURRENCY)")
    worker.add_argument("--loglevel", default="INFO")
    worker.add_argument("extra", nargs="*", help=extra_help)
    worker.set_defaults(func=lambda a: exec_server(worker_argv(queues=a.queue, concurrency=a.concurrency,
                                                               loglevel=a.loglevel, extra=a.extra)))  # fmt: skip
    beat = sub.add_parser("beat", help="the scheduler that sends sweeps, the reaper and retention (run one)")
    beat.add_argument("--loglevel", default="INFO")
    beat.add_argument("extra", nargs="*", help=extra_help)
    beat.set_defaults(func=lambda a: exec_server(beat_argv(loglevel=a.loglevel, extra=a.extra)))
    web = sub.add_parser("web", help="the portal's web server (execs gunicorn portal.wsgi:application)")
    web.add_argument("--bind", type=bind_address, default=DEFAULT_BIND, help=f"HOST:PORT (default {DEFAULT_BIND})")
    web.add_argument("--workers", type=positive, default=DEFAULT_WEB_WORKERS, help="gunicorn worker processes")
    web.add_argument("extra", nargs="*", help=extra_help)
    web.set_defaults(func=lambda a: exec_server(web_argv(bind=a.bind, workers=a.workers, extra=a.extra)))


def main(argv: Sequence[str] | None = None) -> int:
    """`kiln ARGS`. From the command line (no `argv`), the process then ends at once (`leave`)."""
    if argv is None:
        code: int | str | None
        try:
            code = _main(sys.argv[1:])
        except SystemExit as exc:
            code = exc.code
        leave(code)
    return _main(list(argv))


def _main(args: list[str]) -> int:
    if args and args[0] in FORWARDED:
        return forward(args[0], args[1:])
    if args and args[0] == "manage":
        return manage(args[1:])
    parser = build_parser()
    parsed = parser.parse_args(args)
    func: Callable[[argparse.Namespace], int] | None = getattr(parsed, "func", None)
    if func is None:
        parser.print_help()
        return 2
    return func(parsed)


def leave(code: int | str | None) -> NoReturn:
    """End the process with `code` as sys.exit would (None 0, a message printed and 1), without
    Python's teardown of every module: a management command loads ~1,400 of them, and unloading
    them cost `kiln run --wait` 1.3-1.9 s after its last line on a 2-core machine (and
    bench/bench_fanout.py's "notice" phase). What a normal exit does that matters runs first: the
    atexit handlers (logging's flush among them), open database connections closed, output flushed."""
    if isinstance(code, str):
        sys.stderr.write(f"{code}\n")
        code = 1
    try:
        atexit._run_exitfuncs()
        if "django.db" in sys.modules:
            from django.db import connections

            connections.close_all()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe (`kiln run --wait | head`): nothing to flush to
                pass
        os._exit(code or 0)


if __name__ == "__main__":
    sys.exit(main())
