"""Integration tests for the testbed: real sshd in network namespaces, real paramiko with RejectPolicy."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
import pytest

from testbed import Testbed, TestbedError
from testbed.sim import read_state


def _client(tb: Testbed, host: str) -> paramiko.SSHClient:
    node = tb.node(host)
    client = paramiko.SSHClient()
    client.load_host_keys(str(tb.known_hosts_path))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        node.address,
        port=node.port,
        username=tb.ssh_user,
        key_filename=str(tb.client_key_path),
        look_for_keys=False,
        allow_agent=False,
        timeout=5,
        banner_timeout=5,
        auth_timeout=5,
    )
    return client


def _run(client: paramiko.SSHClient, command: str) -> tuple[int, str, str]:
    _, stdout, stderr = client.exec_command(command, timeout=20)
    out = stdout.read().decode()
    err = stderr.read().decode()
    return stdout.channel.recv_exit_status(), out, err


@pytest.fixture
def ssh(clean_testbed: Testbed) -> Iterator[Callable[[str], paramiko.SSHClient]]:
    clients: list[paramiko.SSHClient] = []

    def connect(host: str) -> paramiko.SSHClient:
        client = _client(clean_testbed, host)
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()


def test_it_runs_commands_on_two_nodes_with_their_own_hostnames(ssh: Callable[[str], paramiko.SSHClient]) -> None:
    for host in ("gpu01", "gpu02"):
        client = ssh(host)
        assert _run(client, "hostname") == (0, f"{host}\n", "")


def test_it_puts_the_simulated_nvidia_smi_and_pynvml_on_the_path(ssh: Callable[[str], paramiko.SSHClient]) -> None:
    client = ssh("gpu02")
    rc, out, err = _run(client, "nvidia-smi -L")
    assert rc == 0, err
    assert out.startswith("GPU 0:")
    rc, out, err = _run(client, 'python3 -c "import pynvml; print(pynvml.__name__)"')
    assert (rc, out) == (0, "pynvml\n"), err
    # LD_LIBRARY_PATH reaches the session: the real pynvml loads the fake libnvidia-ml.so.1.
    rc, out, err = _run(client, 'python3 -c "import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount())"')
    assert (rc, out) == (0, "8\n"), err


def test_it_points_each_node_at_its_own_state_file(
    clean_testbed: Testbed, ssh: Callable[[str], paramiko.SSHClient]
) -> None:
    client = ssh("gpu03")
    rc, out, _ = _run(client, 'echo "$KILN_SIM_STATE"')
    assert out.strip() == str(clean_testbed.node("gpu03").state_file)


def test_it_writes_and_clears_faults_in_the_state_file(clean_testbed: Testbed) -> None:
    node = clean_testbed.node("gpu03")
    clean_testbed.set_faults("gpu03", ecc_uncorrectable_gpu=3)
    assert read_state(node.state_file).get("ecc_uncorrectable_gpu") == "3"
    clean_testbed.clear_faults("gpu03")
    assert "ecc_uncorrectable_gpu" not in read_state(node.state_file)


def test_it_shows_injected_faults_to_commands_over_ssh(
    clean_testbed: Testbed, ssh: Callable[[str], paramiko.SSHClient]
) -> None:
    client = ssh("gpu03")
    assert _run(client, "nvidia-smi -L | wc -l")[1].strip() == "8"
    clean_testbed.set_faults("gpu03", missing_gpu=7)
    assert _run(client, "nvidia-smi -L | wc -l")[1].strip() == "7"
    clean_testbed.clear_faults("gpu03")
    assert _run(client, "nvidia-smi -L | wc -l")[1].strip() == "8"


def test_it_rejects_an_unknown_fault_key(clean_testbed: Testbed) -> None:
    with pytest.raises(TestbedError, match="unknown"):
        clean_testbed.set_faults("gpu03", ecc_uncorectable_gpu=3)


def test_it_refuses_connections_while_sshd_is_stopped(clean_testbed: Testbed) -> None:
    clean_testbed.stop_sshd("gpu04")
    assert not clean_testbed.sshd_alive("gpu04")
    with pytest.raises((paramiko.ssh_exception.NoValidConnectionsError, OSError)):
        _client(clean_testbed, "gpu04")
    clean_testbed.start_sshd("gpu04")
    client = _client(clean_testbed, "gpu04")
    try:
        assert _run(client, "hostname")[1] == "gpu04\n"
    finally:
        client.close()


def test_it_makes_paramiko_reject_a_rotated_host_key(clean_testbed: Testbed) -> None:
    clean_testbed.rotate_host_key("gpu05")
    with pytest.raises(paramiko.BadHostKeyException):
        _client(clean_testbed, "gpu05")
    clean_testbed.restore_host_key("gpu05")
    client = _client(clean_testbed, "gpu05")
    client.close()


def test_it_rejects_a_host_missing_from_known_hosts(clean_testbed: Testbed, tmp_path: Path) -> None:
    node = clean_testbed.node("gpu06")
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        client.connect(node.address, username="root", key_filename=str(clean_testbed.client_key_path), timeout=5)
    client.close()


def test_it_lists_every_node_in_known_hosts_by_address_and_hostname(testbed: Testbed) -> None:
    keys = paramiko.HostKeys(str(testbed.known_hosts_path))
    for node in testbed.nodes:
        assert keys.lookup(node.address) is not None
        assert keys.lookup(node.hostname) is not None


def test_it_describes_itself_as_json(testbed: Testbed) -> None:
    desc = json.loads(json.dumps(testbed.as_dict()))
    assert [n["hostname"] for n in desc["nodes"]] == [f"gpu{i:02d}" for i in range(1, 9)]
    assert desc["nodes"][0]["address"] == f"10.{testbed.subnet_octet}.0.11"
    assert Path(desc["client_key_path"]).exists()
    assert testbed.hosts_path.read_text().splitlines()[0] == f"{testbed.nodes[0].address} gpu01"
    assert "HostName" in testbed.ssh_config_path.read_text()
    reloaded = Testbed.load(testbed.workdir)
    assert reloaded.status() == {n.hostname: True for n in testbed.nodes}


def _netns_with_prefix(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


def test_it_brings_16_nodes_up_and_leaves_nothing_behind_after_down(
    testbed_factory: Callable[..., Testbed],
) -> None:
    tb = testbed_factory(16, name="ku")
    assert len(tb.nodes) == 16
    pids = [tb.sshd_pid(n.hostname) for n in tb.nodes]
    assert all(pids)
    for node in (tb.nodes[0], tb.nodes[-1]):
        with socket.create_connection((node.address, node.port), timeout=2):
            pass
    # An open session keeps a process inside the namespace; down() must still clean up.
    client = _client(tb, tb.nodes[-1].hostname)
    tb.down()
    client.close()
    assert _netns_with_prefix(f"{tb.name}-") == []
    assert not Path(f"/sys/class/net/{tb.bridge}").exists()
    for pid in pids:
        assert pid is not None
        assert not Path(f"/proc/{pid}").exists() or "sshd" not in Path(f"/proc/{pid}/cmdline").read_text()
    tb.down()  # idempotent


def test_it_refuses_a_second_testbed_with_the_same_name(testbed: Testbed, tmp_path: Path) -> None:
    other = Testbed(2, tmp_path / "other", name=testbed.name)
    with pytest.raises(TestbedError, match="already exists"):
        other.up()
    other.down()  # must not touch the running testbed
    assert Testbed.load(testbed.workdir).status() == {n.hostname: True for n in testbed.nodes}


@pytest.mark.usefixtures("testbed_available")
def test_it_cleans_up_after_a_failed_up(tmp_path: Path) -> None:
    tb = Testbed(2, tmp_path / "bad", name=f"kf{os.getpid() % 1000}")
    tb.up()
    tb.down()
    # Make sshd fail: a host key path that cannot exist makes sshd refuse to start.
    tb2 = Testbed(2, tmp_path / "bad", name=tb.name)
    original = tb2._sshd_config

    def broken(node, env):  # type: ignore[no-untyped-def]
        return original(node, env).replace(f"HostKey {node.host_key_path}", "HostKey /nonexistent/key")

    tb2._sshd_config = broken  # type: ignore[method-assign]
    with pytest.raises(TestbedError, match="sshd") as excinfo:
        tb2.up()
    assert "/nonexistent/key" in str(excinfo.value)  # the sshd log is in the message
    assert _netns_with_prefix(f"{tb2.name}-") == []
    tb2.down()


@pytest.mark.usefixtures("testbed_available")
def test_it_works_from_the_command_line(tmp_path: Path) -> None:
    workdir = tmp_path / "cli"
    name = f"kc{os.getpid() % 1000}"
    cmd = [sys.executable, "-m", "testbed"]
    up = subprocess.run(
        [*cmd, "up", "--nodes", "2", "--dir", str(workdir), "--name", name], capture_output=True, text=True
    )
    try:
        assert up.returncode == 0, up.stderr
        desc = json.loads(up.stdout)
        assert [n["hostname"] for n in desc["nodes"]] == ["gpu01", "gpu02"]
        fault = subprocess.run(
            [*cmd, "fault", "--dir", str(workdir), "gpu02", "remap_pending_gpu=1"], capture_output=True, text=True
        )
        assert fault.returncode == 0, fault.stderr
        assert read_state(workdir / "nodes" / "gpu02" / "state").get("remap_pending_gpu") == "1"
        stop = subprocess.run([*cmd, "stop-sshd", "--dir", str(workdir), "gpu01"], capture_output=True, text=True)
        assert stop.returncode == 0, stop.stderr
        status = subprocess.run([*cmd, "status", "--dir", str(workdir)], capture_output=True, text=True)
        assert json.loads(status.stdout)["sshd"] == {"gpu01": False, "gpu02": True}
        bad = subprocess.run(
            [*cmd, "fault", "--dir", str(workdir), "gpu02", "nonsense"], capture_output=True, text=True
        )
        assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr
    finally:
        down = subprocess.run([*cmd, "down", "--dir", str(workdir)], capture_output=True, text=True)
    assert down.returncode == 0, down.stderr
    assert _netns_with_prefix(f"{name}-") == []


def test_it_brings_64_nodes_up_in_a_few_seconds(testbed_factory: Callable[..., Testbed]) -> None:
    started = time.monotonic()
    tb = testbed_factory(64, name="kl")
    elapsed = time.monotonic() - started
    assert all(tb.status().values())
    tb.down()
    assert elapsed < 15, f"64-node up took {elapsed:.1f}s"


def test_a_launcher_refusing_sessions_is_named_as_such(clean_testbed: Testbed) -> None:
    """A node whose sshd allows one session per connection (MaxSessions 1): a second concurrent
    command on Kiln's one connection is refused, and the transport says why, so pairwise
    localisation can run fewer pairs at once (portal.runs.pairs.localise)."""
    from concurrent.futures import ThreadPoolExecutor

    from checks.core.base import Command
    from worker.ssh import NodeTarget, SessionRefusedError, SSHTransport

    node = clean_testbed.node("gpu07")
    config = node.sshd_config_path.read_text()
    node.sshd_config_path.write_text(config.replace("MaxSessions 50", "MaxSessions 1"))
    clean_testbed.restart_sshd("gpu07")
    transport = SSHTransport(
        NodeTarget(
            hostname="gpu07", address=node.address, port=node.port, user=clean_testbed.ssh_user,
            key_path=str(clean_testbed.client_key_path), known_hosts=clean_testbed.known_hosts_path.read_text(),
            connect_timeout=5,
        )
    )  # fmt: skip
    try:
        transport.open()
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(transport.run, Command(argv=("sleep", "2"), timeout=10)) for _ in range(2)]
        outcomes = [f.exception() or f.result() for f in futures]
        refused = [o for o in outcomes if isinstance(o, SessionRefusedError)]
        assert len(refused) == 1, outcomes
        assert "MaxSessions" in refused[0].message and refused[0].kind == "session refused"
        assert transport.run(Command(argv=("hostname",), timeout=10)).stdout == "gpu07\n", "the connection lives on"
    finally:
        transport.close()
        node.sshd_config_path.write_text(config)
        clean_testbed.restart_sshd("gpu07")
