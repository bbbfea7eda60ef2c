"""A node's sshd frozen (SIGSTOP) mid-check: its kernel still answers TCP, so only an SSH-level
keepalive with a reply deadline notices. The check ends `error` within 30 s saying so, the node's
remaining checks end at once with the same reason, and once the node answers again the reaper
stops the burn-in nobody could stop while it was frozen."""

from __future__ import annotations

import re
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from checks.core.base import Command
from portal.execution.reaper import reap
from portal.runs import services
from portal.runs.models import CheckResult, Run, RunEvent
from tests.faults.conftest import state_file
from tests.faults.helpers import sim_processes, wait_for
from worker.ssh import CHANNEL_SLACK_S, REMOTE_KILL_GRACE_S, NodeTarget, SSHTransport, UnreachableError

pytestmark = pytest.mark.integration


def test_it_reports_a_frozen_sshd_within_thirty_seconds_and_fails_the_rest_at_once(
    testbed_cluster, clean_testbed, processes, soak_plan, settings
) -> None:
    processes("worker", concurrency=2)
    node = testbed_cluster.nodes.get(hostname="gpu05")
    run = services.run_start(cluster=testbed_cluster, plan=soak_plan(3600), nodes=[node])
    burn = CheckResult.objects.filter(run=run, item_key="burn-in")
    state = state_file(clean_testbed, "gpu05")
    wait_for(lambda: sim_processes(state, "gpu_burn") and burn.exclude(remote_pgid=None).exists(), 60, "the burn-in")

    assert clean_testbed.freeze_sshd("gpu05")
    frozen = time.monotonic()
    results = CheckResult.objects.filter(run=run)
    wait_for(lambda: not results.filter(status__in=["queued", "running"]).exists(), 60, "the node's checks to end")
    took = time.monotonic() - frozen
    print(f"sshd frozen: the node's checks ended {took:.1f} s later")

    assert took < 30, f"the frozen sshd was noticed after {took:.0f} s"
    reasons = dict(results.values_list("item_key", "reason"))
    assert set(results.values_list("status", flat=True)) == {"error"}
    assert reasons["burn-in"].startswith("unreachable: sshd on gpu05 stopped answering: no reply to keepalives for ")
    assert reasons["ecc-health"] == reasons["burn-in"]  # the rest end at once, with the same reason
    ends = sorted(results.values_list("finished_at", flat=True))
    assert ends[-1] - ends[0] < timedelta(seconds=2)
    wait_for(lambda: Run.objects.get(pk=run.pk).status == "error", 5, "the run to close")  # its task's last step
    assert sim_processes(state, "gpu_burn")  # nobody could stop it through a frozen sshd

    clean_testbed.thaw_sshd("gpu05")
    lapsed = timezone.now() + timedelta(seconds=settings.KILN_LEASE_TTL_S + 5)
    reap(now=lapsed)  # the next reaper round after the lease lapsed

    wait_for(lambda: not sim_processes(state, "gpu_burn"), 10, "the reaper to stop the burn-in")
    message = RunEvent.objects.get(run=run, kind="processes stopped").message
    assert message.startswith("burn-in on gpu05 (error, lease lapsed): process group ")
    assert message.endswith("stopped over a new connection by the reaper")


def ssh_target(testbed, hostname: str, **overrides) -> NodeTarget:
    node = testbed.node(hostname)
    return NodeTarget(
        hostname=hostname,
        address=node.address,
        port=node.port,
        user=testbed.ssh_user,
        key_path=str(testbed.client_key_path),
        known_hosts=testbed.known_hosts_path.read_text(),
        connect_timeout=5,
        **overrides,
    )


def run_then_freeze(testbed, transport: SSHTransport, command: Command) -> tuple[Any, float]:
    """Start `command`, freeze the node's sshd while it runs; returns (its output or the exception
    it raised, seconds from the freeze to that)."""
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(_call(transport.run, command)), daemon=True)
    thread.start()
    time.sleep(1)  # running on the node
    testbed.freeze_sshd("gpu06")
    frozen = time.monotonic()
    thread.join(60)
    return (outcome[0] if outcome else None), time.monotonic() - frozen


def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:
        return exc


def test_a_command_outliving_its_own_timeout_marks_the_node_hung(clean_testbed) -> None:
    """Keepalives off (an hour apart): the channel backstop ends the wait on a frozen node, and the
    next commands fail at once instead of each waiting out its own timeout."""
    transport = SSHTransport(ssh_target(clean_testbed, "gpu06", keepalive_s=3600))
    transport.open()
    try:
        first, waited = run_then_freeze(clean_testbed, transport, Command(argv=("sleep", "3"), timeout=2))
        assert first.timed_out and first.exit_code is None
        assert waited < 2 + REMOTE_KILL_GRACE_S + CHANNEL_SLACK_S

        started = time.monotonic()
        with pytest.raises(UnreachableError, match=r"^gpu06 is hung: sleep was still running \d+ s after it started"):
            transport.run(Command(argv=("true",), timeout=600))
        assert time.monotonic() - started < 1
    finally:
        clean_testbed.thaw_sshd("gpu06")
        transport.close()


def test_the_transport_says_which_sshd_stopped_answering(clean_testbed) -> None:
    transport = SSHTransport(ssh_target(clean_testbed, "gpu06", keepalive_s=2, keepalive_count=2))
    transport.open()
    try:
        raised, took = run_then_freeze(clean_testbed, transport, Command(argv=("sleep", "60"), timeout=120))
        assert isinstance(raised, UnreachableError), raised
        assert re.fullmatch(r"sshd on gpu06 stopped answering: no reply to keepalives for \d+ s", raised.message)
        assert took < 2 + 2 * 2 + 2  # silence, unanswered requests, the monitor's ticks
    finally:
        clean_testbed.thaw_sshd("gpu06")
        transport.close()


def test_a_session_the_frozen_sshd_never_opens_says_so(clean_testbed) -> None:
    transport = SSHTransport(ssh_target(clean_testbed, "gpu06"))
    transport.open()
    try:
        clean_testbed.freeze_sshd("gpu06")
        with pytest.raises(UnreachableError, match=r"^sshd on gpu06 stopped answering: no reply to opening a session"):
            transport.run(Command(argv=("true",), timeout=10))
    finally:
        clean_testbed.thaw_sshd("gpu06")
        transport.close()
