"""The probe is a one-shot process: at the end of sampling it ignores SIGTERM, SIGHUP and SIGINT so
its cleanup and its JSON finish whatever comes. Tests that sample in this process put the pytest
process's own handlers back afterwards."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

PROBE_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


@pytest.fixture(autouse=True)
def _signal_handlers_restored() -> Iterator[None]:
    previous = {sig: signal.getsignal(sig) for sig in PROBE_SIGNALS}
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)
