"""A simulated GPU cluster on one machine: N network-namespace hosts, each with its own sshd.

Every host is a network namespace (``<name>-gpu01`` ...) joined to a bridge (``<name>br0``) in the
root namespace by a veth pair, with an address in ``10.<octet>.0.0/16``. Each host runs its own
sshd (own hostname via ``unshare --uts``, own host key, own PidFile) whose sessions see the node
simulator (fake ``nvidia-smi`` and ``libnvidia-ml.so.1``) and the node's fault-state file through
``SetEnv``.

Everything the testbed creates is recorded in ``<workdir>/testbed.json`` so that ``down()`` works
from another process (``Testbed.load(workdir).down()``). ``down()`` only kills processes whose PIDs
it wrote (and that still run our sshd config) or that live inside its own namespaces, and only
deletes the namespaces, veths and bridge it named.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

from testbed.network import (
    LOCK_FILE,
    create_network,
    delete_network,
    global_lock,
    link_exists,
    netns_list,
    octets_in_use,
)
from testbed.procs import (
    TestbedError,
    cmdline,
    comm,
    kill_and_wait,
    pid_alive,
    pids_in_netns,
    run_cmd,
    run_parallel,
    venv_bin,
)
from testbed.sim import SimPaths, build_simulator, write_state
from testbed.sshd import SSHD, TestbedNode, node_sshd_env, read_pid, rotated_marker, sshd_config, start_sshds

__all__ = ["LOCK_FILE", "SSHD", "Testbed", "TestbedError", "TestbedNode"]

DEFAULT_OCTET = 213
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,7}$")
MAX_NODES = 999
FIRST_HOST = 11  # nodes get .0.11, .0.12, ...; the bridge gets .0.1
PORT = 22


class Testbed:
    """A simulated cluster of ``size`` hosts. ``up()`` builds it, ``down()`` removes it."""

    __test__ = False

    ssh_user: str = "root"

    def __init__(self, size: int, workdir: Path, *, name: str = "kb", subnet_octet: int | None = None) -> None:
        if not 1 <= size <= MAX_NODES:
            raise TestbedError(f"size must be between 1 and {MAX_NODES}, got {size}")
        if not NAME_RE.match(name):
            raise TestbedError(f"name {name!r} must match {NAME_RE.pattern} (it prefixes interface names)")
        if subnet_octet is not None and not 0 <= subnet_octet <= 255:
            raise TestbedError(f"subnet_octet must be 0..255, got {subnet_octet}")
        self.size = size
        self.workdir = Path(workdir).absolute()
        self.name = name
        self.subnet_octet = subnet_octet
        self.bridge = f"{name}br0"
        self.client_key_path = self.workdir / "client" / "id_ed25519"
        self.known_hosts_path = self.workdir / "known_hosts"
        self.authorized_keys_path = self.workdir / "client" / "authorized_keys"
        self.state_path = self.workdir / "testbed.json"
        self.ssh_config_path = self.workdir / "ssh_config"  # `ssh -F <this> gpu01` works from a shell
        self.hosts_path = self.workdir / "hosts"  # /etc/hosts format, for tools that want names
        self.sim_paths: SimPaths | None = None
        self.nodes: list[TestbedNode] = []
        self._is_up = False
        self._claimed = False  # True once our names/subnet were checked free, i.e. down() may delete them
        self._rotated: set[str] = set()
        if subnet_octet is not None:
            self.nodes = self._plan_nodes(subnet_octet)

    # ----------------------------------------------------------------- description
    def _plan_nodes(self, octet: int) -> list[TestbedNode]:
        width = 2 if self.size < 100 else 3
        base = ipaddress.IPv4Address(f"10.{octet}.0.0")
        nodes = []
        for i in range(1, self.size + 1):
            host = f"gpu{i:0{width}d}"
            node_dir = self.workdir / "nodes" / host
            nodes.append(
                TestbedNode(
                    hostname=host,
                    address=str(base + FIRST_HOST - 1 + i),
                    port=PORT,
                    netns=f"{self.name}-{host}",
                    veth=f"{self.name}v{i}",
                    node_dir=node_dir,
                    state_file=node_dir / "state",
                    pid_file=node_dir / "sshd.pid",
                    host_key_path=node_dir / "ssh_host_ed25519_key",
                    original_host_key_path=node_dir / "ssh_host_ed25519_key.orig",
                    sshd_config_path=node_dir / "sshd_config",
                    log_path=node_dir / "sshd.log",
                )
            )
        return nodes

    def node(self, hostname: str) -> TestbedNode:
        for node in self.nodes:
            if node.hostname == hostname or node.address == hostname:
                return node
        raise TestbedError(f"no node {hostname!r} in testbed {self.name!r} (have {self.hostnames()})")

    def hostnames(self) -> list[str]:
        return [n.hostname for n in self.nodes]

    @property
    def network(self) -> str:
        return f"10.{self.subnet_octet}.0.0/16"

    @property
    def gateway(self) -> str:
        return f"10.{self.subnet_octet}.0.1"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "size": self.size,
            "workdir": str(self.workdir),
            "subnet_octet": self.subnet_octet,
            "network": self.network if self.subnet_octet is not None else None,
            "bridge": self.bridge,
            "bridge_address": self.gateway if self.subnet_octet is not None else None,
            "ssh_user": self.ssh_user,
            "client_key_path": str(self.client_key_path),
            "known_hosts_path": str(self.known_hosts_path),
            "ssh_config_path": str(self.ssh_config_path),
            "hosts_path": str(self.hosts_path),
            "sim": (
                {"bin_dir": str(self.sim_paths.bin_dir), "lib_dir": str(self.sim_paths.lib_dir)}
                if self.sim_paths
                else None
            ),
            "nodes": [n.as_dict() for n in self.nodes],
        }

    def _save(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.as_dict(), indent=2) + "\n")
        tmp.replace(self.state_path)

    @classmethod
    def load(cls, workdir: Path) -> Testbed:
        """Reattach to a testbed brought up (possibly by another process) in ``workdir``."""
        path = Path(workdir).absolute() / "testbed.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise TestbedError(f"no testbed in {workdir} ({path} does not exist)") from None
        tb = cls(int(data["size"]), Path(data["workdir"]), name=data["name"], subnet_octet=data["subnet_octet"])
        if data.get("sim"):
            tb.sim_paths = SimPaths(bin_dir=Path(data["sim"]["bin_dir"]), lib_dir=Path(data["sim"]["lib_dir"]))
        tb._is_up = True
        tb._claimed = True
        tb._rotated = {n.hostname for n in tb.nodes if rotated_marker(n).exists()}
        return tb

    # ----------------------------------------------------------------- up
    def _preflight(self) -> None:
        if os.geteuid() != 0:
            raise TestbedError("the testbed needs root (network namespaces, veths, sshd); run as root")
        for tool in ("ip", "unshare", "ssh-keygen"):
            if shutil.which(tool) is None:
                raise TestbedError(f"{tool} not found on PATH (apt-get install iproute2 util-linux openssh-client)")
        if not SSHD.exists():
            raise TestbedError(f"{SSHD} is missing (apt-get install --no-install-recommends openssh-server)")
        proc = run_cmd(["ip", "netns", "list"], check=False)
        if proc.returncode != 0:
            raise TestbedError(f"'ip netns' is unavailable: {proc.stderr.strip()}")

    def _claim_network(self) -> None:
        """Check that our names and subnet are free; pick an octet if none was given. Lock held."""
        if link_exists(self.bridge):
            raise TestbedError(
                f"bridge {self.bridge} already exists: another testbed named {self.name!r} is up "
                f"(run `python -m testbed down --dir <its dir>` or pick another name)"
            )
        stale = [ns for ns in netns_list() if ns.startswith(f"{self.name}-")]
        if stale:
            raise TestbedError(f"network namespaces with prefix {self.name}- already exist: {stale[:5]}")
        used = octets_in_use()
        if self.subnet_octet is None:
            candidates = [DEFAULT_OCTET, *range(200, 255), *range(100, 200)]
            free = [o for o in candidates if o not in used]
            if not free:
                raise TestbedError("no free 10.x.0.0/16 subnet for the testbed")
            self.subnet_octet = free[0]
            self.nodes = self._plan_nodes(self.subnet_octet)
        elif self.subnet_octet in used:
            raise TestbedError(f"10.{self.subnet_octet}.0.0/16 is already in use on this machine; pick another octet")

    def up(self) -> Testbed:
        """Create namespaces, bridge, keys, configs and start every sshd. Safe to call twice."""
        if self._is_up:
            return self
        self._preflight()
        if self.state_path.exists():  # leftovers of an earlier run in the same workdir
            Testbed.load(self.workdir).down()
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            with global_lock():
                self._claim_network()
                self._claimed = True
                self._save()  # record what we are about to create, so down() can undo a partial up
                create_network(bridge=self.bridge, gateway=self.gateway, nodes=self.nodes)
            self._prepare_files()
            self._is_up = True
            self._save()
            start_sshds([n for n in self.nodes])
        except BaseException:
            if self._claimed:
                with contextlib.suppress(Exception):
                    self.down()
            raise
        return self

    def _prepare_files(self) -> None:
        self.sim_paths = build_simulator(self.workdir / "sim")
        self.client_key_path.parent.mkdir(parents=True, exist_ok=True)
        for p in (self.client_key_path, self.client_key_path.with_suffix(".pub")):
            p.unlink(missing_ok=True)
        keygens = [
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                f"kiln-testbed-{self.name}-client",
                "-f",
                str(self.client_key_path),
            ]
        ]
        for n in self.nodes:
            n.node_dir.mkdir(parents=True, exist_ok=True)
            for p in (n.host_key_path, n.host_key_path.with_suffix(".pub"), n.pid_file, rotated_marker(n)):
                p.unlink(missing_ok=True)
            keygens.append(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{n.hostname}", "-f", str(n.host_key_path)]
            )
        run_parallel(keygens, what="ssh-keygen")
        self.client_key_path.chmod(0o600)
        shutil.copyfile(self.client_key_path.with_suffix(".pub"), self.authorized_keys_path)
        venv = str(venv_bin())
        known: list[str] = []
        for n in self.nodes:
            shutil.copyfile(n.host_key_path, n.original_host_key_path)
            n.original_host_key_path.chmod(0o600)
            write_state(n.state_file, node=n.hostname)
            env = node_sshd_env(n, self.sim_paths, venv)
            n.sshd_config_path.write_text(self._sshd_config(n, env))
            pub = n.host_key_path.with_suffix(".pub").read_text().split()
            known.append(f"{n.address} {pub[0]} {pub[1]}")
            known.append(f"{n.hostname} {pub[0]} {pub[1]}")
        self.known_hosts_path.write_text("\n".join(known) + "\n")
        self.hosts_path.write_text("".join(f"{n.address} {n.hostname}\n" for n in self.nodes))
        self.ssh_config_path.write_text(
            "".join(
                f"Host {n.hostname} {n.address}\n  HostName {n.address}\n  Port {n.port}\n  User {self.ssh_user}\n"
                f"  IdentityFile {self.client_key_path}\n  IdentitiesOnly yes\n"
                f"  UserKnownHostsFile {self.known_hosts_path}\n  StrictHostKeyChecking yes\n"
                for n in self.nodes
            )
        )

    def _sshd_config(self, n: TestbedNode, env: dict[str, str]) -> str:
        return sshd_config(n, env, name=self.name, authorized_keys_path=self.authorized_keys_path)

    # ----------------------------------------------------------------- runtime control
    def _require_up(self) -> None:
        if not self._is_up:
            raise TestbedError(f"testbed {self.name!r} is not up")

    def sshd_pid(self, hostname: str) -> int | None:
        """PID of the node's listening sshd, or None when it is not running."""
        n = self.node(hostname)
        pid = read_pid(n)
        if pid is None or not pid_alive(pid) or str(n.sshd_config_path) not in cmdline(pid):
            return None
        return pid

    def sshd_alive(self, hostname: str) -> bool:
        return self.sshd_pid(hostname) is not None

    def status(self) -> dict[str, bool]:
        return {n.hostname: self.sshd_alive(n.hostname) for n in self.nodes}

    def set_faults(self, hostname: str, **faults: Any) -> None:
        """Rewrite the node's state file with these faults (replacing earlier ones)."""
        self._require_up()
        n = self.node(hostname)
        try:
            write_state(n.state_file, node=n.hostname, **faults)
        except ValueError as exc:  # unknown fault key, multi-line value
            raise TestbedError(f"{hostname}: {exc}") from exc

    def clear_faults(self, hostname: str) -> None:
        self.set_faults(hostname)

    def stop_sshd(self, hostname: str) -> None:
        """Stop the node's sshd listener: new connections are refused."""
        self._require_up()
        pid = self.sshd_pid(hostname)
        if pid is not None:
            kill_and_wait([pid])
        self.node(hostname).pid_file.unlink(missing_ok=True)

    def start_sshd(self, hostname: str) -> None:
        self._require_up()
        if self.sshd_alive(hostname):
            return
        start_sshds([self.node(hostname)])

    def sshd_processes(self, hostname: str) -> list[int]:
        """Every sshd process of the node: the listener and each connection's session processes."""
        pids = pids_in_netns([self.node(hostname).netns])
        return [pid for pid in pids if comm(pid) in ("sshd", "sshd-session")]

    def freeze_sshd(self, hostname: str) -> list[int]:
        """SIGSTOP every sshd process of the node (a hung sshd): its kernel still answers TCP, so
        connections stay up and TCP keepalives are answered, but nothing reaches the commands or
        comes back. The commands themselves keep running. Returns the stopped pids."""
        self._require_up()
        pids = self.sshd_processes(hostname)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        return pids

    def thaw_sshd(self, hostname: str) -> None:
        """SIGCONT every sshd process of the node (harmless when none was stopped)."""
        for pid in self.sshd_processes(hostname):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def restart_sshd(self, hostname: str) -> None:
        self.stop_sshd(hostname)
        start_sshds([self.node(hostname)])

    def rotate_host_key(self, hostname: str) -> None:
        """Give the node a new host key (known_hosts is NOT updated) and restart its sshd."""
        self._require_up()
        n = self.node(hostname)
        with tempfile.TemporaryDirectory(dir=n.node_dir) as tmp:
            new = Path(tmp) / "key"
            run_cmd(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{n.hostname}-rotated", "-f", str(new)])
            new.replace(n.host_key_path)
            new.with_suffix(".pub").replace(n.host_key_path.with_suffix(".pub"))
        rotated_marker(n).touch()
        self._rotated.add(n.hostname)
        self.restart_sshd(hostname)

    def restore_host_key(self, hostname: str) -> None:
        """Put the original host key (the one in known_hosts) back and restart the node's sshd."""
        self._require_up()
        n = self.node(hostname)
        shutil.copyfile(n.original_host_key_path, n.host_key_path)
        n.host_key_path.chmod(0o600)
        pub = run_cmd(["ssh-keygen", "-y", "-f", str(n.host_key_path)]).stdout
        n.host_key_path.with_suffix(".pub").write_text(pub)
        rotated_marker(n).unlink(missing_ok=True)
        self._rotated.discard(n.hostname)
        self.restart_sshd(hostname)

    def rotated_hosts(self) -> set[str]:
        return set(self._rotated)

    def reset(self) -> None:
        """Back to the state right after up(): no faults, original host keys, every sshd running,
        nothing else running on the nodes (a test that failed half-way may have left a long
        burn-in behind, or a command of a frozen node that nobody could stop)."""
        self._require_up()
        for n in self.nodes:
            self.thaw_sshd(n.hostname)
        strays = [
            pid for pid in pids_in_netns([n.netns for n in self.nodes]) if comm(pid) not in ("sshd", "sshd-session")
        ]
        for pid in strays:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for host in sorted(self._rotated):
            self.restore_host_key(host)
        stopped = [n for n in self.nodes if not self.sshd_alive(n.hostname)]
        if stopped:
            start_sshds(stopped)
        for n in self.nodes:
            self.clear_faults(n.hostname)

    # ----------------------------------------------------------------- down
    def down(self) -> None:
        """Kill our sshds (by pidfile PID) and anything left in our namespaces; delete our links/netns.

        Works after a partial up() and when called twice. A testbed whose up() never claimed its names
        (e.g. because another testbed of the same name is up) deletes nothing.
        """
        if not self._claimed:
            return
        pids: list[int] = []
        for n in self.nodes:
            pid = read_pid(n)
            if pid is not None and pid_alive(pid) and str(n.sshd_config_path) in cmdline(pid):
                pids.append(pid)
        kill_and_wait(pids)
        existing = set(netns_list())
        ours = [n for n in self.nodes if n.netns in existing]
        # Session processes (sshd children of live connections) live in our namespaces too.
        kill_and_wait(pids_in_netns([n.netns for n in ours]))
        errors = delete_network(bridge=self.bridge, nodes=self.nodes, ours=ours)
        for n in self.nodes:
            n.pid_file.unlink(missing_ok=True)
        self._is_up = False
        self._claimed = False
        self._rotated.clear()
        self.state_path.unlink(missing_ok=True)
        left = [ns for ns in netns_list() if ns.startswith(f"{self.name}-gpu")]
        left += [n.veth for n in self.nodes if link_exists(n.veth)]
        if left or link_exists(self.bridge):
            raise TestbedError(f"down() left {left[:5]} / bridge {self.bridge}: {'; '.join(errors)}")

    def __enter__(self) -> Testbed:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def __repr__(self) -> str:
        return f"Testbed(name={self.name!r}, size={self.size}, subnet=10.{self.subnet_octet}.0.0/16, up={self._is_up})"
