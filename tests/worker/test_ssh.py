"""The SSH seam without a network: quoting, jump hosts, known_hosts, fingerprints, the local transport."""

from __future__ import annotations

import base64
import os
import shlex
import subprocess
import time
from pathlib import Path

import paramiko
import pytest

from checks.core.base import Command
from worker import ssh
from worker.ssh import (
    CHANNEL_SLACK_S,
    REMOTE_KILL_GRACE_S,
    HostKeyError,
    JumpHost,
    LocalTransport,
    NodeTarget,
    SSHTransport,
    TransportError,
    open_transport,
    remote_shell_line,
)
from worker.timeouts import node_task_limits

HOSTILE = ("; rm -rf /", "$(touch /tmp/pwned)", "`id`", "it's", 'say "hi"', "a\nb", "*", "", "--", "x | y && z")


# --- remote_shell_line --------------------------------------------------------------------------


def test_it_quotes_hostile_argv_inside_a_remote_timeout() -> None:
    command = Command(argv=("printf", "%s\\n", *HOSTILE), timeout=30)

    line = remote_shell_line(command)

    assert shlex.split(line) == ["timeout", "-k", str(REMOTE_KILL_GRACE_S), "30", "printf", "%s\\n", *HOSTILE]
    assert line.startswith(f"timeout -k {REMOTE_KILL_GRACE_S} 30 ")


def test_it_quotes_environment_variables_before_the_timeout() -> None:
    command = Command(argv=("nvidia-smi",), timeout=7.9, env={"CUDA_VISIBLE_DEVICES": "0,1", "X": "$(reboot); `id`"})

    assert shlex.split(remote_shell_line(command)) == [
        "env", "CUDA_VISIBLE_DEVICES=0,1", "X=$(reboot); `id`",
        "timeout", "-k", str(REMOTE_KILL_GRACE_S), "7", "nvidia-smi",
    ]  # fmt: skip


def test_it_never_sends_a_remote_timeout_below_one_second() -> None:
    assert shlex.split(remote_shell_line(Command(argv=("true",), timeout=0.2)))[3] == "1"


def test_it_runs_the_quoted_line_in_a_real_shell_without_interpreting_it(tmp_path: Path) -> None:
    """The line, run by sh, hands printf exactly our argv (nothing is executed or expanded)."""
    marker = tmp_path / "pwned"
    argv = ("printf", "[%s]\\n", "; touch " + str(marker), f"$(touch {marker})", "`id`", "*")
    line = remote_shell_line(Command(argv=argv, timeout=10))

    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, cwd=tmp_path, check=True)

    assert done.stdout.splitlines() == [f"[{a}]" for a in argv[2:]]
    assert not marker.exists()


# --- JumpHost -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("bastion", JumpHost(host="bastion")),
        ("bastion.example.com:2222", JumpHost(host="bastion.example.com", port=2222)),
        ("ops@bastion", JumpHost(host="bastion", user="ops")),
        ("ops@10.0.0.1:22022", JumpHost(host="10.0.0.1", user="ops", port=22022)),
        ("me@corp@bastion", JumpHost(host="bastion", user="me@corp")),
    ],
)
def test_it_parses_jump_hosts_like_ssh_j(spec: str, expected: JumpHost) -> None:
    assert JumpHost.parse(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "expected \\[user@\\]host\\[:port\\]"),
        ("ops@", "expected"),
        (":22", "expected"),
        ("bastion:ssh", "port 'ssh' is not a number"),
        ("bastion:", "port '' is not a number"),
    ],
)
def test_it_refuses_bad_jump_hosts(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        JumpHost.parse(spec)


# --- host keys ----------------------------------------------------------------------------------


def keygen(tmp_path: Path, name: str, kind: str = "ed25519") -> tuple[Path, str]:
    """A fresh key pair from ssh-keygen: (private key path, public key line)."""
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", name, "-f", str(path)], check=True)
    return path, path.with_suffix(".pub").read_text().strip()


def load_public(line: str) -> paramiko.PKey:
    key_type, data = line.split()[:2]
    return paramiko.PKey.from_type_string(key_type, base64.b64decode(data))


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa"])
def test_it_prints_fingerprints_like_ssh_keygen(tmp_path: Path, kind: str) -> None:
    path, public = keygen(tmp_path, f"key_{kind}", kind)
    listed = subprocess.run(["ssh-keygen", "-lf", str(path) + ".pub"], capture_output=True, text=True, check=True)
    expected = listed.stdout.split()[1]
    assert expected.startswith("SHA256:")

    assert ssh.fingerprint(load_public(public)) == expected
    if kind == "ed25519":
        assert ssh.fingerprint(paramiko.Ed25519Key(filename=str(path))) == expected


def test_it_reads_known_hosts_lines(tmp_path: Path) -> None:
    _, one = keygen(tmp_path, "one")
    _, two = keygen(tmp_path, "two")
    _, hashed = keygen(tmp_path, "three")
    hashed_file = tmp_path / "hashed_hosts"
    hashed_file.write_text(f"secret-host {hashed}\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(hashed_file)], check=True, capture_output=True)
    hashed_line = hashed_file.read_text().strip()
    assert hashed_line.startswith("|1|") and "secret-host" not in hashed_line
    text = "\n".join(
        [
            "# a comment naming node9 ssh-ed25519 AAAA",
            "",
            f"  node1,10.0.0.1 {one}  ",
            f"[node2]:2222 {two}",
            hashed_line,
            "just-a-hostname",
            "node3 ssh-unknown-type AAAAB3NzaC1yc2EAAAADAQAB",
            "node4 ssh-ed25519 !!!not-base64!!",
            "node5 ssh-ed25519 AAAA",
            "@cert-authority *.example.com " + one,
        ]
    )

    keys = ssh._known_hosts(text)

    expected_one = ssh.fingerprint(load_public(one))
    for name in ("node1", "10.0.0.1"):
        assert ssh.fingerprint(keys.lookup(name)["ssh-ed25519"]) == expected_one
    assert ssh.fingerprint(keys.lookup("[node2]:2222")["ssh-ed25519"]) == ssh.fingerprint(load_public(two))
    assert keys.lookup("node2") is None  # port 2222 only
    assert ssh.fingerprint(keys.lookup("secret-host")["ssh-ed25519"]) == ssh.fingerprint(load_public(hashed))
    for absent in ("node9", "just-a-hostname", "node3", "node4", "node5", "a.example.com"):
        assert keys.lookup(absent) is None, absent


def test_it_builds_verifying_ssh_clients_without_connecting(tmp_path: Path) -> None:
    _, public = keygen(tmp_path, "host")
    target = NodeTarget(
        hostname="gpu001", address="10.0.0.1", port=2222, user="kiln", known_hosts=f"[10.0.0.1]:2222 {public}\n",
        jump="ops@bastion:2200",
    )  # fmt: skip

    transport = SSHTransport(target)

    client = transport.connection.client
    assert isinstance(client._policy, ssh._VerifyingPolicy)
    assert client.get_host_keys().lookup("[10.0.0.1]:2222") is not None
    assert (transport.connection.host, transport.connection.port, transport.connection.user) == (
        "10.0.0.1",
        2222,
        "kiln",
    )
    gateway = transport.connection.gateway
    assert (gateway.host, gateway.port, gateway.user) == ("bastion", 2200, "ops")
    assert isinstance(gateway.client._policy, ssh._VerifyingPolicy)
    with pytest.raises(HostKeyError, match="not in the cluster's known_hosts"):
        client._policy.missing_host_key(client, "10.0.0.9", load_public(public))


def test_a_client_trusts_only_its_own_hosts_keys_from_one_parse_of_known_hosts(tmp_path: Path) -> None:
    _, first = keygen(tmp_path, "first")
    _, second = keygen(tmp_path, "second")
    _, other = keygen(tmp_path, "other")
    lines = [f"10.0.0.{i} {other}" for i in range(2, 200)]
    text = "\n".join([f"10.0.0.1 {first}", *lines, f"10.0.0.1 {second}", f"[10.0.0.1]:2222 {other}"]) + "\n"
    ssh._known_hosts.cache_clear()

    clients = [SSHTransport(NodeTarget(hostname=f"gpu{i}", address="10.0.0.1", known_hosts=text)) for i in range(3)]

    assert ssh._known_hosts.cache_info().misses == 1  # parsed once for every node of the cluster
    for transport in clients:
        keys = transport.connection.client.get_host_keys()
        assert list(keys.keys()) == ["10.0.0.1"]  # not a copy of every node's entries
        # Two lines of one key type for a host: the later one is trusted, as before.
        assert ssh.fingerprint(keys.lookup("10.0.0.1")["ssh-ed25519"]) == ssh.fingerprint(load_public(second))
    on_port = SSHTransport(NodeTarget(hostname="gpu9", address="10.0.0.1", port=2222, known_hosts=text))
    assert list(on_port.connection.client.get_host_keys().keys()) == ["[10.0.0.1]:2222"]
    unknown = SSHTransport(NodeTarget(hostname="gpu8", address="10.0.0.250", known_hosts=text))
    assert list(unknown.connection.client.get_host_keys().keys()) == []


# --- LocalTransport -----------------------------------------------------------------------------


def local(**env: str) -> LocalTransport:
    return LocalTransport(NodeTarget(hostname="localhost", transport="local", local_env=env))


def test_it_runs_local_commands_with_stdin_and_env() -> None:
    command = Command(
        argv=("sh", "-c", 'read line; echo "$line from $NODE_NAME/$EXTRA"; echo oops >&2; exit 3'),
        timeout=10,
        stdin="hello\n",
        env={"EXTRA": "cmd-env"},
    )

    output = local(NODE_NAME="sim01").run(command)

    assert (output.stdout, output.stderr, output.exit_code, output.timed_out) == (
        "hello from sim01/cmd-env\n",
        "oops\n",
        3,
        False,
    )
    assert output.command is command
    assert output.duration_s is not None and output.duration_s < 5


def test_it_lets_command_env_win_over_node_env() -> None:
    output = local(WHO="node").run(Command(argv=("sh", "-c", "echo $WHO"), timeout=5, env={"WHO": "command"}))
    assert (output.stdout, output.exit_code) == ("command\n", 0)


def test_it_reports_a_missing_binary_as_exit_127() -> None:
    output = local().run(Command(argv=("/nonexistent/kiln-tool", "--x"), timeout=5))

    assert output.exit_code == 127
    assert output.stderr == "/nonexistent/kiln-tool: No such file or directory"
    assert not output.timed_out


def live_members(pgid: int, wait_s: float = 5.0) -> list[int]:
    """Processes of a process group that are still alive (zombies excluded), polled for up to
    `wait_s`: a SIGKILLed process takes a moment to leave the process table (this flaked in CI)."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            state, group = fields[0], int(fields[2])
            if group == pgid and state not in ("Z", "X"):
                alive.append(int(entry.name))
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def test_it_kills_the_whole_process_group_on_timeout() -> None:
    command = Command(argv=("sh", "-c", "sleep 30 & echo $$ $!; sleep 30"), timeout=1)
    started = time.monotonic()

    output = local().run(command)

    assert time.monotonic() - started < 10
    assert output.timed_out and output.exit_code is None
    leader, child = (int(pid) for pid in output.stdout.split())
    assert os.getpgid(os.getpid()) != leader  # the command had a group of its own
    assert child != leader
    assert live_members(leader) == []  # the background sleep went with its shell


def test_it_opens_local_transports_and_refuses_unknown_ones() -> None:
    assert isinstance(open_transport(NodeTarget(hostname="h", transport="local")), LocalTransport)
    with pytest.raises(TransportError, match="unknown transport 'nope'") as excinfo:
        open_transport(NodeTarget(hostname="h", transport="nope"))
    assert excinfo.value.kind == "transport"


# --- nested timeouts ----------------------------------------------------------------------------


@pytest.mark.parametrize("slack", [0, 1, 60])
@pytest.mark.parametrize("budgets", [[60], [60, 30, 3600], []])
def test_it_nests_task_limits_outside_the_command_budgets(settings, slack: int, budgets: list[float]) -> None:
    settings.KILN_TASK_SLACK_S = slack
    connect = 10.0

    soft, hard = node_task_limits(command_budgets=budgets, connect_timeout=connect)

    innermost = sum(b + REMOTE_KILL_GRACE_S + CHANNEL_SLACK_S for b in budgets)  # every command's own backstop
    assert soft >= innermost + 2 * connect + slack
    assert soft > sum(budgets) + REMOTE_KILL_GRACE_S * len(budgets)
    assert hard > soft
    assert hard - soft >= 5


def test_it_grows_task_limits_with_the_plan() -> None:
    short = node_task_limits(command_budgets=[60], connect_timeout=10)
    long = node_task_limits(command_budgets=[60, 600], connect_timeout=10)
    assert long[0] - short[0] == 600 + REMOTE_KILL_GRACE_S + CHANNEL_SLACK_S
    assert long[1] > short[1]


def test_it_prefers_aes_gcm_and_keeps_every_other_cipher_paramiko_offers() -> None:
    import socket

    from worker.ssh import PREFERRED_CIPHERS, _gcm_first_transport

    left, right = socket.socketpair()
    try:
        transport = _gcm_first_transport(left)
        offered = transport.get_security_options().ciphers
        assert offered[: len(PREFERRED_CIPHERS)] == PREFERRED_CIPHERS
        assert sorted(offered) == sorted(paramiko.Transport._preferred_ciphers)
        assert left.gettimeout() == 1.0  # the reader thread's wake-up while the connection is silent
    finally:
        left.close()
        right.close()
