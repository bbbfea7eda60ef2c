"""Shared reads: a node's identical read-only commands run once per run, while nothing changed it.

Several checks read the same evidence. In the `quick` plan the inventory, software, ECC and links
checks all start with the node probe (`python3 -` with the probe script on stdin: a fresh Python
and an NVML start each time); run once, its output serves all four. `SharedReads` wraps one node's
transport for one node task and applies three rules:

- A command marked `read_only` (checks.core.base.Command) whose identical twin (same argv, stdin and env)
  completed earlier in this task, with only read-only commands run since, is answered with the
  twin's output, as long as the twin finished within this command's own timeout. The answer
  carries the asking command (its label and timeout), the twin's output and duration.
- A command that is not read-only forgets every stored output before it runs: a burn-in, NCCL or
  fio may change what a read sees (ECC counters, temperatures, Xid lines), so an ECC check after a
  burn-in reads its counters after the burn-in.
- Only completed outputs are kept (an exit status, not timed out). A read that timed out or lost
  its connection is not handed on: the next check asks the node again.

One instance per node task, used from that task's thread.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from checks.core.base import Command, CommandOutput
from worker.ssh import PgidCallback, Transport

logger = logging.getLogger(__name__)

_Key = tuple[tuple[str, ...], str | None, tuple[tuple[str, str], ...]]


def _key(command: Command) -> _Key:
    return command.argv, command.stdin, tuple(sorted(command.env.items()))


class SharedReads:
    """A Transport that shares read-only outputs between the checks of one node task."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._kept: dict[_Key, CommandOutput] = {}
        self.ran = 0  # commands sent to the node
        self.shared = 0  # commands answered from an earlier identical read

    def run(self, command: Command, *, tag: str = "", on_start: PgidCallback | None = None) -> CommandOutput:
        """A shared answer starts nothing on the node: `on_start` is called only for a command sent."""
        if not command.read_only:
            self._kept.clear()  # before it runs: even if it fails half-way, nothing stale survives
            self.ran += 1
            return self.transport.run(command, tag=tag, on_start=on_start)
        key = _key(command)
        kept = self._kept.get(key)
        if kept is not None and (kept.duration_s or 0.0) <= command.timeout:
            self.shared += 1
            logger.debug("shared read: %s answered from an identical earlier read", command.label or command.argv[0])
            return dataclasses.replace(kept, command=command)
        self.ran += 1
        output = self.transport.run(command, tag=tag, on_start=on_start)
        if output.exit_code is not None and not output.timed_out:
            self._kept[key] = output
        return output

    def close(self) -> None:
        self._kept.clear()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:
        # Anything else a transport offers (its target, a way to stop its remote processes) is the
        # wrapped transport's own.
        if name == "transport":
            raise AttributeError(name)
        return getattr(self.transport, name)
