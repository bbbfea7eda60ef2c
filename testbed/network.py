"""Namespace networking of the testbed: the bridge in the root namespace, one network namespace per
node joined to it by a veth pair, and the checks that our names and subnet are free."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.procs import TestbedError, run_cmd

if TYPE_CHECKING:
    from testbed.sshd import TestbedNode

LOCK_FILE = Path("/run/kiln-testbed.lock")


@contextlib.contextmanager
def global_lock() -> Iterator[None]:
    """Serialise resource checks + creation between testbeds started by concurrent processes."""
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def netns_list() -> list[str]:
    proc = run_cmd(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def octets_in_use() -> set[int]:
    """Second octets of 10.x addresses/routes visible in the root namespace."""
    text = run_cmd(["ip", "-4", "-o", "addr", "show"], check=False).stdout
    text += run_cmd(["ip", "-4", "route", "show", "table", "all"], check=False).stdout
    used: set[int] = set()
    for match in re.finditer(r"\b10\.(\d{1,3})\.\d{1,3}\.\d{1,3}(?:/(\d{1,2}))?", text):
        prefix = int(match.group(2)) if match.group(2) else 32
        if prefix < 8:
            continue
        if prefix < 16:  # a wider 10.x route covers a range of octets
            net = ipaddress.ip_network(f"10.{match.group(1)}.0.0/{prefix}", strict=False)
            used.update(range(net.network_address.packed[1], net.broadcast_address.packed[1] + 1))
        else:
            used.add(int(match.group(1)))
    return used


def create_network(*, bridge: str, gateway: str, nodes: list[TestbedNode]) -> None:
    """The bridge, every namespace and veth in one `ip -batch`, then each namespace's addresses."""
    lines = [
        f"link add {bridge} type bridge",
        f"addr add {gateway}/16 dev {bridge}",
        f"link set {bridge} up",
    ]
    for n in nodes:
        lines += [
            f"netns add {n.netns}",
            f"link add {n.veth} type veth peer name eth0 netns {n.netns}",
            f"link set {n.veth} master {bridge} up",
        ]
    run_cmd(["ip", "-batch", "-"], stdin="\n".join(lines) + "\n")
    procs = []
    for n in nodes:
        batch = f"link set lo up\naddr add {n.address}/16 dev eth0\nlink set eth0 up\n"
        proc = subprocess.Popen(
            ["ip", "-n", n.netns, "-batch", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append((n, proc, batch))
    errors = []
    for n, proc, batch in procs:
        _, err = proc.communicate(batch)
        if proc.returncode != 0:
            errors.append(f"{n.netns}: {err.strip()}")
    if errors:
        raise TestbedError("configuring namespaces failed:\n" + "\n".join(errors[:5]))


def delete_network(*, bridge: str, nodes: list[TestbedNode], ours: list[TestbedNode]) -> list[str]:
    """Delete the namespaces in `ours`, the veths left of the others, and the bridge; wait for the
    veths to go. Returns the errors `ip` reported."""
    errors: list[str] = []
    # Deleting a namespace destroys its veth pair in one batched kernel cleanup, much faster than
    # `link del` per veth (~18 ms each); veths whose namespace is already gone are deleted directly.
    lines = [f"netns del {n.netns}" for n in ours]
    lines += [f"link del {n.veth}" for n in nodes if n not in ours and link_exists(n.veth)]
    if link_exists(bridge):
        lines.append(f"link del {bridge}")
    if lines:
        # -force: keep going past an error so one odd leftover does not strand the rest.
        proc = run_cmd(["ip", "-force", "-batch", "-"], stdin="\n".join(lines) + "\n", check=False)
        if proc.returncode != 0:
            errors.append(proc.stderr.strip())
    deadline = time.monotonic() + 10
    while any(link_exists(n.veth) for n in nodes) and time.monotonic() < deadline:
        time.sleep(0.02)
    return errors
