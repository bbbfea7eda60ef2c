"""A testbed node and its sshd: the node's files, its sshd_config (whose SetEnv points sessions at
the node simulator and fault-state file), and starting sshd inside the node's namespace."""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.procs import TestbedError, port_open
from testbed.sim import SimPaths, node_env

SSHD = Path("/usr/sbin/sshd")


@dataclass(frozen=True)
class TestbedNode:
    """One simulated host: its namespace, address, sshd files and fault-state file."""

    __test__ = False

    hostname: str
    address: str
    port: int
    netns: str
    veth: str
    node_dir: Path
    state_file: Path
    pid_file: Path
    host_key_path: Path
    original_host_key_path: Path
    sshd_config_path: Path
    log_path: Path

    def as_dict(self) -> dict[str, Any]:
        return {
            "hostname": self.hostname,
            "address": self.address,
            "port": self.port,
            "netns": self.netns,
            "veth": self.veth,
            "state_file": str(self.state_file),
            "pid_file": str(self.pid_file),
            "host_key_path": str(self.host_key_path),
            "sshd_config_path": str(self.sshd_config_path),
            "log_path": str(self.log_path),
        }


def read_pid(n: TestbedNode) -> int | None:
    try:
        text = n.pid_file.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def log_tail(n: TestbedNode, limit: int = 2000) -> str:
    try:
        return n.log_path.read_text(errors="replace")[-limit:].strip() or "(empty log)"
    except OSError:
        return "(no log)"


def rotated_marker(n: TestbedNode) -> Path:
    return n.node_dir / "host_key_rotated"


def node_sshd_env(n: TestbedNode, sim_paths: SimPaths, venv_bin: str) -> dict[str, str]:
    """The environment sshd gives the node's sessions: the simulator's, with the running interpreter's
    bin folder on PATH (right after the simulator's) and the node's own HOME."""
    env = dict(node_env(sim_paths, n.state_file))
    path_parts = [p for p in env.get("PATH", os.defpath).split(":") if p]
    if venv_bin not in path_parts:
        sim_bin = str(sim_paths.bin_dir)
        at = path_parts.index(sim_bin) + 1 if sim_bin in path_parts else 0
        path_parts.insert(at, venv_bin)
    env["PATH"] = ":".join(path_parts)
    # Each node gets its own HOME: bash sources ~/.bashrc for commands run by sshd, and the
    # machine's /root/.bashrc may prepend its own python (pyenv) to PATH.
    home = n.node_dir / "home"
    home.mkdir(exist_ok=True)
    (home / ".bashrc").write_text("# simulated node " + n.hostname + ": keep PATH from sshd SetEnv\n")
    env["HOME"] = str(home)
    return env


def sshd_config(n: TestbedNode, env: dict[str, str], *, name: str, authorized_keys_path: Path) -> str:
    for key, value in env.items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key) or any(c in value for c in '"\n\\'):
            raise TestbedError(f"cannot pass {key}={value!r} through sshd SetEnv")
    setenv = " ".join(f'"{k}={v}"' for k, v in env.items())
    return "\n".join(
        [
            f"# Kiln testbed {name}: node {n.hostname}",
            f"ListenAddress {n.address}",
            f"Port {n.port}",
            f"HostKey {n.host_key_path}",
            f"PidFile {n.pid_file}",
            f"AuthorizedKeysFile {authorized_keys_path}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "MaxStartups 200:30:400",
            "MaxSessions 50",
            "LoginGraceTime 30",
            "Subsystem sftp internal-sftp",
            f"SetEnv {setenv}",
            "",
        ]
    )


def start_sshds(nodes: list[TestbedNode], timeout: float = 10.0) -> None:
    """Start every node's sshd at once, then wait until each listens and has written its pid file."""
    Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
    argvs = []
    for n in nodes:
        n.pid_file.unlink(missing_ok=True)
        script = f"hostname {n.hostname} && exec {SSHD} -f {n.sshd_config_path} -E {n.log_path}"
        argvs.append(["ip", "netns", "exec", n.netns, "unshare", "--uts", "sh", "-c", script])
    launches = [
        (
            n,
            subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            ),
        )
        for n, argv in zip(nodes, argvs, strict=True)
    ]
    failed = []
    for n, proc in launches:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            failed.append((n, proc.returncode, out))
    if failed:
        n, rc, out = failed[0]
        raise TestbedError(
            f"sshd failed to start on {len(failed)} node(s) (first: {n.hostname}, exit {rc}) {out.strip()}\n"
            f"{n.log_path}:\n{log_tail(n)}"
        )
    deadline = time.monotonic() + timeout
    pending = list(nodes)
    while pending:
        pending = [n for n in pending if not port_open(n.address, n.port, timeout=0.2)]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    if pending:
        n = pending[0]
        raise TestbedError(
            f"sshd of {len(pending)} node(s) not listening after {timeout:.0f}s "
            f"(first: {n.hostname} {n.address}:{n.port}); its log {n.log_path}:\n{log_tail(n)}"
        )
    # PidFile is written right after bind; wait for it so stop/down can find the process.
    while True:
        missing = [n for n in nodes if read_pid(n) is None]
        if not missing:
            break
        if time.monotonic() > deadline:
            raise TestbedError(f"sshd of {missing[0].hostname} wrote no pid file {missing[0].pid_file}")
        time.sleep(0.01)
