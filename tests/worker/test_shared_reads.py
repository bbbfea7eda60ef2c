"""Shared reads (worker/shared_reads.py): the probe once per node and run, never across a change."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from checks.core.base import REGISTRY, Command, CommandOutput, NodeContext
from worker.shared_reads import SharedReads
from worker.ssh import PgidCallback, UnreachableError

PROBE = Command(argv=("python3", "-"), stdin="print('probe')", timeout=60, label="probe.py", read_only=True)


class CountingTransport:
    """Answers every command with a fresh output that says how many commands ran before it."""

    def __init__(self, *, exit_code: int | None = 0, timed_out: bool = False, duration: float = 1.0) -> None:
        self.ran: list[Command] = []
        self.exit_code = exit_code
        self.timed_out = timed_out
        self.duration = duration
        self.closed = False
        self.tags: list[str] = []

    def run(self, command: Command, *, tag: str = "", on_start: PgidCallback | None = None) -> CommandOutput:
        self.ran.append(command)
        self.tags.append(tag)
        if on_start is not None:
            on_start(1000 + len(self.ran))  # the process group it "started"
        return CommandOutput(command, f"reading #{len(self.ran)}", "", self.exit_code, self.timed_out, self.duration)

    def close(self) -> None:
        self.closed = True


def test_it_runs_an_identical_read_only_command_once() -> None:
    transport = CountingTransport()
    reads = SharedReads(transport)
    first = reads.run(PROBE)
    again = reads.run(dataclasses.replace(PROBE, label="probe for ecc"))
    assert len(transport.ran) == 1
    assert again.stdout == first.stdout == "reading #1"
    assert again.command.label == "probe for ecc"  # the asking check's own command, for its parser
    assert (reads.ran, reads.shared) == (1, 1)


def test_a_sent_command_carries_its_tag_and_a_shared_answer_starts_nothing() -> None:
    """The lease's tracking (portal/runs/leases.py) learns the process group of what runs, and only that."""
    transport = CountingTransport()
    reads = SharedReads(transport)
    started: list[int] = []
    reads.run(PROBE, tag="r1", on_start=started.append)
    reads.run(PROBE, tag="r2", on_start=started.append)  # shared: nothing runs
    reads.run(Command(argv=("gpu_burn", "60"), timeout=90), tag="r3", on_start=started.append)
    assert transport.tags == ["r1", "r3"]
    assert started == [1001, 1002]


def test_it_reads_again_after_a_command_that_is_not_read_only() -> None:
    """An ECC check after a burn-in must see the counters read after the burn-in."""
    transport = CountingTransport()
    reads = SharedReads(transport)
    before = reads.run(PROBE)
    reads.run(Command(argv=("gpu_burn", "60"), timeout=90, label="burn"))
    after = reads.run(PROBE)
    assert len(transport.ran) == 3
    assert (before.stdout, after.stdout) == ("reading #1", "reading #3")


def test_it_keeps_sharing_across_other_read_only_commands() -> None:
    transport = CountingTransport()
    reads = SharedReads(transport)
    reads.run(PROBE)
    reads.run(Command(argv=("ibstat",), timeout=30, read_only=True))
    assert reads.run(PROBE).stdout == "reading #1"
    assert len(transport.ran) == 2


def test_it_forgets_before_a_changing_command_even_when_that_command_fails() -> None:
    class Failing(CountingTransport):
        def run(self, command: Command, **kwargs: Any) -> CommandOutput:
            if not command.read_only:
                self.ran.append(command)
                raise UnreachableError("connection lost")
            return super().run(command, **kwargs)

    transport = Failing()
    reads = SharedReads(transport)
    reads.run(PROBE)
    with pytest.raises(UnreachableError):
        reads.run(Command(argv=("fio", "job"), timeout=60))
    assert reads.run(PROBE).stdout == "reading #3"


@pytest.mark.parametrize(
    "other",
    [
        dataclasses.replace(PROBE, stdin="print('another script')"),
        dataclasses.replace(PROBE, argv=("python3", "-", "--sample", "1")),
        dataclasses.replace(PROBE, env={"CUDA_VISIBLE_DEVICES": "0"}),
        dataclasses.replace(PROBE, read_only=False),
    ],
    ids=["stdin", "argv", "env", "not-read-only"],
)
def test_it_shares_only_identical_read_only_commands(other: Command) -> None:
    transport = CountingTransport()
    reads = SharedReads(transport)
    reads.run(PROBE)
    assert reads.run(other).stdout == "reading #2"


@pytest.mark.parametrize(
    "transport",
    [CountingTransport(timed_out=True, exit_code=124), CountingTransport(exit_code=None)],
    ids=["timed-out", "no-exit-status"],
)
def test_it_does_not_hand_on_a_read_that_did_not_complete(transport: CountingTransport) -> None:
    reads = SharedReads(transport)
    reads.run(PROBE)
    reads.run(PROBE)
    assert len(transport.ran) == 2


def test_it_hands_on_a_completed_failure_as_it_is() -> None:
    """The same read of the same state: a probe that exited 3 would exit 3 again."""
    transport = CountingTransport(exit_code=3)
    reads = SharedReads(transport)
    reads.run(PROBE)
    assert reads.run(PROBE).exit_code == 3
    assert len(transport.ran) == 1


def test_it_does_not_hand_on_a_read_slower_than_the_asking_commands_timeout() -> None:
    transport = CountingTransport(duration=20.0)
    reads = SharedReads(transport)
    reads.run(PROBE)
    reads.run(dataclasses.replace(PROBE, timeout=10))
    assert len(transport.ran) == 2


def test_it_closes_the_transport_and_passes_other_calls_through() -> None:
    transport = CountingTransport()
    reads = SharedReads(transport)
    assert reads.exit_code == 0  # an attribute of the wrapped transport
    reads.close()
    assert transport.closed


def quick_plan_commands() -> list[Command]:
    from checks.core.base import by_slug
    from portal.catalog.services import BUILTIN_PLANS

    _, _, items = BUILTIN_PLANS["quick"]
    commands = []
    for slug, overrides in items:
        cls = by_slug(slug)
        assert cls is not None, slug
        check = cls()
        params = check.make_params({**check.default_params(), **overrides})
        commands += check.commands(params, NodeContext(hostname="n1", since=1.7e9))
    return commands


def test_the_quick_plan_runs_the_probe_once_per_node() -> None:
    commands = quick_plan_commands()
    transport = CountingTransport()
    reads = SharedReads(transport)
    for command in commands:
        reads.run(command)
    probes = [c for c in transport.ran if c.argv == ("python3", "-")]
    assert sum(1 for c in commands if c.argv == ("python3", "-")) == 4
    assert len(probes) == 1
    # sw_consistency's stack-versions script (checks/software/stack.py) is its own read, run once;
    # so are the inventory's identity reads (DMI, BMC FRU).
    assert (len(commands), reads.ran, reads.shared) == (13, 10, 3)


# Tools that load the GPUs, the network or the disks, or write files: never read-only.
CHANGING_TOOLS = ("gpu_burn", "all_reduce_perf", "fio", "dcgmi", "mpirun", "srun", "ior", "elbencho", "nvbandwidth")
# Asking a tool whether it exists, its version or its help starts nothing (sw_consistency's stack
# script asks srun exactly that: checks/software/stack.py).
QUERY_ONLY = re.compile(r"(?:has|absent) srun\b|srun --(?:version|help)\b")


def test_no_command_that_loads_the_node_is_marked_read_only() -> None:
    checked = 0
    for kind, check_class in REGISTRY.items():
        check = check_class()
        params = check.make_params({})
        commands = []
        try:
            commands = check.commands(params, NodeContext(hostname="n1"))
        except NotImplementedError:  # group checks build group_commands
            continue
        for command in commands:
            text = QUERY_ONLY.sub("", " ".join(command.argv))
            if any(tool in text for tool in CHANGING_TOOLS):
                checked += 1
                assert not command.read_only, f"{kind}: {command.label or text[:60]} loads the node"
    assert checked >= 4  # burn-in, nccl, fio, dcgm at least
