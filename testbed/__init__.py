"""Kiln testbed: a simulated GPU cluster of network-namespace hosts with sshd, on one machine.

    from testbed import Testbed
    with Testbed(8, Path("/tmp/kiln-testbed")) as tb:
        tb.set_faults("gpu03", ecc_uncorrectable_gpu=3)

CLI: ``python -m testbed up --nodes 8 --dir /tmp/kiln-testbed``. Pytest fixtures: ``testbed.pytest_plugin``.
"""

from __future__ import annotations

from testbed.cluster import Testbed, TestbedError, TestbedNode

__all__ = ["Testbed", "TestbedError", "TestbedNode"]
