"""At execution time, a database row alone never decides what runs on a Kiln host: a tampered
cluster on the `local` transport is refused unless the server allows it, a node's local
environment is never used without that, a stored scheduler command is rebuilt from server
configuration, and the worker's secrets never reach a local command."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from checks.core.base import Command
from portal.execution.execution import execute_node
from portal.health.models import ClusterHealthSettings, SchedulerAction
from portal.health.services import health_evaluate_run, scheduler_action_execute
from portal.inventory.models import Cluster, Node
from portal.runs import services
from tests.health.helpers import finish
from worker.ssh import LocalTransport, LocalTransportRefused, NodeTarget, open_transport

pytestmark = pytest.mark.django_db


def trap_bin(tmp_path: Path, marker: Path) -> Path:
    """A directory whose `python3` (what the probe runs) writes `marker`: proof that it ran."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python3", "nvidia-smi"):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\necho ran >> {marker}\nexit 1\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


@pytest.fixture
def tampered(quick_plan, tmp_path: Path):
    """A cluster set to `local` and a node given an environment straight in the database (no form
    or admin page offers either to an operator)."""
    marker = tmp_path / "ran-on-the-worker"
    cluster = Cluster.objects.create(name="t1", profile="H100-SXM-8")
    node = Node.objects.create(cluster=cluster, hostname="t01")
    Cluster.objects.filter(pk=cluster.pk).update(transport="local")
    Node.objects.filter(pk=node.pk).update(local_env={"PATH": str(trap_bin(tmp_path, marker)), "LD_PRELOAD": ""})
    cluster.refresh_from_db()
    run = services.run_start(cluster=cluster, plan=quick_plan, enqueue=False)
    return run, node, marker


def test_it_refuses_a_local_cluster_at_execution_unless_the_server_allows_it(tampered, settings) -> None:
    settings.KILN_ALLOW_LOCAL_TRANSPORT = False
    run, node, marker = tampered
    execute_node(run_id=run.pk, node_id=node.pk, claim="test")
    assert not marker.exists(), "a command ran on the worker host"
    results = list(run.results.filter(node=node).values_list("status", "reason"))
    assert results and all(status == "error" for status, _ in results)
    assert all("KILN_ALLOW_LOCAL_TRANSPORT" in reason for _, reason in results)


def test_it_runs_a_local_cluster_where_the_server_allows_it(tampered, settings) -> None:
    """The control of the test above: with the setting on, the very same rows run locally."""
    settings.KILN_ALLOW_LOCAL_TRANSPORT = True
    run, node, marker = tampered
    execute_node(run_id=run.pk, node_id=node.pk, claim="test")
    assert marker.exists()


def test_open_transport_follows_the_setting_and_an_explicit_decision(settings) -> None:
    target = NodeTarget(hostname="h", transport="local")
    settings.KILN_ALLOW_LOCAL_TRANSPORT = False
    with pytest.raises(LocalTransportRefused, match="KILN_ALLOW_LOCAL_TRANSPORT"):
        open_transport(target)
    assert isinstance(open_transport(target, allow_local=True), LocalTransport)
    settings.KILN_ALLOW_LOCAL_TRANSPORT = True
    assert isinstance(open_transport(target), LocalTransport)
    with pytest.raises(LocalTransportRefused):
        open_transport(target, allow_local=False)


def test_a_local_command_never_sees_the_workers_secrets(monkeypatch) -> None:
    secrets = {
        "KILN_SECRET_KEY": "s3cret-django-key",
        "KILN_SIGNING_KEY": "/data/signing_key.pem",
        "KILN_METRICS_TOKEN": "metrics-token-123",
        "DATABASE_URL": "postgresql://kiln:pw@db/kiln",
        "CELERY_BROKER_URL": "redis://:pw@redis:6379/0",
        "KILN_EMAIL_HOST_PASSWORD": "smtp-password",
        "AWS_SECRET_ACCESS_KEY": "aws",
        "SSH_AUTH_SOCK": "/tmp/agent.sock",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KILN_HARMLESS", "kept")
    out = LocalTransport(NodeTarget(hostname="h", transport="local")).run(Command(argv=("env",), timeout=10))
    names = {line.split("=", 1)[0] for line in out.stdout.splitlines()}
    assert names.isdisjoint(secrets), names & set(secrets)
    assert {"PATH", "KILN_HARMLESS"} <= names
    assert not any(value in out.stdout for value in secrets.values())


# --- scheduler hooks ------------------------------------------------------------------------------


@pytest.fixture
def drained(cluster, make_run, controller):
    """A planned (not yet run) drain of n02 on a Slurm cluster with hooks on."""
    cluster.scheduler = "slurm"
    cluster.save()
    ClusterHealthSettings.objects.create(cluster=cluster, hook_mode="on")
    health_evaluate_run(run_id=finish(make_run(cluster), {"n02": ("fail", "ECC")}).pk)
    return SchedulerAction.objects.get()


def test_a_drain_runs_exactly_the_fixed_argv_with_the_hostname(drained, controller) -> None:
    assert drained.argv == [
        str(controller.scontrol), "update", "nodename=n02", "state=drain", "reason=kiln: failed: ECC and Xid: ECC"
    ]  # fmt: skip
    assert scheduler_action_execute(action_id=drained.pk).status == "done"
    assert controller.calls() == [["update", "nodename=n02", "state=drain", "reason=kiln: failed: ECC and Xid: ECC"]]


def test_a_tampered_stored_command_is_rebuilt_not_run(drained, controller, tmp_path: Path) -> None:
    marker = tmp_path / "owned"
    SchedulerAction.objects.filter(pk=drained.pk).update(argv=["sh", "-c", f"touch {marker}"], reason="x\ny")
    action = scheduler_action_execute(action_id=drained.pk)
    assert not marker.exists()
    assert action.status == "done"
    assert controller.calls() == [["update", "nodename=n02", "state=drain", "reason=kiln: x y"]]
    assert SchedulerAction.objects.get(pk=drained.pk).argv[0] == str(controller.scontrol), "it records what ran"


def test_a_hostname_that_reads_as_an_option_is_refused(drained, controller) -> None:
    Node.objects.filter(pk=drained.node_id).update(hostname="--kubeconfig=/etc/kubernetes/admin.conf")
    action = scheduler_action_execute(action_id=drained.pk)
    assert action.status == "failed" and action.attempts == 1, "refused, and not retried"
    assert "refused: node hostname" in action.output
    assert controller.calls() == []


def test_an_action_of_another_scheduler_is_refused(drained, controller) -> None:
    SchedulerAction.objects.filter(pk=drained.pk).update(action="cordon")
    action = scheduler_action_execute(action_id=drained.pk)
    assert action.status == "failed" and "not an action of the cluster's scheduler" in action.output
    assert controller.calls() == []


def test_the_hook_environment_is_the_workers_not_the_databases(drained, settings, tmp_path: Path, monkeypatch) -> None:
    """No field feeds the controller's environment: the program sees the worker's own (less its
    secrets), whatever is stored for the cluster."""
    dump = tmp_path / "env.txt"
    fake = tmp_path / "scontrol"
    fake.write_text(f'#!/bin/sh\nenv > {dump}\necho "$@" >> {dump}\n')
    fake.chmod(0o755)
    settings.KILN_SCONTROL_PATH = str(fake)
    monkeypatch.setenv("KILN_SECRET_KEY", "never-shown-to-scontrol")
    assert scheduler_action_execute(action_id=drained.pk).status == "done"
    text = dump.read_text()
    assert "update nodename=n02 state=drain reason=kiln: failed: ECC and Xid: ECC" in text
    assert "never-shown-to-scontrol" not in text
    assert "LD_PRELOAD" not in text and "PYTHONWARNINGS" not in text


def test_an_ssh_controller_without_a_host_is_refused_not_localhost(drained, settings, controller) -> None:
    settings.KILN_CONTROLLER_TRANSPORT = "ssh"
    action = scheduler_action_execute(action_id=drained.pk)
    assert action.status == "failed" and "no controller host" in action.output
    assert controller.calls() == []


def test_an_unusable_server_configuration_is_refused(drained, settings, controller) -> None:
    for name, value in [
        ("KILN_CONTROLLER_TRANSPORT", "telnet"),
        ("KILN_SCONTROL_PATH", "scontrol --help"),
        ("KILN_SCONTROL_PATH", "-x"),
    ]:
        SchedulerAction.objects.filter(pk=drained.pk).update(status="pending", attempts=0)
        saved = getattr(settings, name)
        setattr(settings, name, value)
        action = scheduler_action_execute(action_id=drained.pk)
        setattr(settings, name, saved)
        assert action.status == "failed" and name in action.output, (name, value, action.output)
    assert controller.calls() == []
