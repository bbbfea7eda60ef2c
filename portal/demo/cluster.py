"""The demo cluster: 8 simulated nodes on the local transport, two of them faulty (`kiln_demo`).

Needs no root and no sshd: each node is the simulator (fake NVML + nvidia-smi) with its own state
file, run on this host. The nodes' `local_env` (PATH, LD_LIBRARY_PATH of the simulator) is set here,
by server code; no form or admin page edits it. Their runs need KILN_ALLOW_LOCAL_TRANSPORT=1.
Seeding twice is harmless: it converges to the same cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from checks.core.base import simulator_params
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.catalog.services import fast_plan_ensure
from portal.demo.facility import demo_facility_ensure
from portal.inventory.models import Cluster, Node
from testbed.sim import build_simulator, node_env, write_state

DEMO_NODES = [f"demo{i:02d}" for i in range(1, 9)]
# The two faults a delivery engineer meets most: a GPU with uncorrectable ECC errors, and a node
# imaged with a different driver than its peers.
DEMO_FAULTS: dict[str, dict[str, Any]] = {
    "demo03": {"ecc_uncorrectable_gpu": 5},
    "demo06": {"driver": "535.104.05"},
}
DEMO_DRIVER = "550.54.15"
# What a simulated check takes besides the duration its params declare, for the plan estimates
# (Cluster.check_overhead_s): the quick sweep took 11 to 20 s on the demo's eight nodes (5 s of it
# declared, 7 checks: 0.8 to 2.1 s a check) and the demo acceptance 153 to 163 s (115 s declared,
# 18 checks: 2.1 to 2.7 s), on a busy 2-core machine; 1.5 s keeps both estimates within a factor of
# 1.5 (tests/portal/test_plan_estimates.py). The checks' own 20 s is real hardware over SSH.
DEMO_CHECK_OVERHEAD_S = 1.5
# Two racks of four (the capacity page's floor plan and the heat soak's racks, PDUs, UPS and loop).
DEMO_RACKS = {"R01": DEMO_NODES[:4], "R02": DEMO_NODES[4:]}


def demo_serial(position: int) -> str:
    """A chassis serial in the vendors' style (letters and digits, no spaces), unique per demo node."""
    return f"DMO24{position:05d}"


def plan_with_soak(plan: TestPlan) -> None:
    """The demo's acceptance ends with the heat soak, so its certificate has a power and cooling
    section (the demo's facility service answers for its PDUs and CDU)."""
    last = plan.items.order_by("-order").values_list("order", flat=True).first() or 0
    soak = CheckDefinition.objects.get(slug="power-soak")
    TestPlanItem.objects.create(
        plan=plan, check_definition=soak, order=last + 1, param_overrides=simulator_params("power-soak")
    )


@dataclass(frozen=True)
class DemoSeeded:
    created: bool  # else refreshed
    outside: list[str]  # nodes outside the demo's racks, whose PDU feeds were left as they are


def demo_cluster_ensure(*, healthy: bool) -> DemoSeeded:
    """Create or refresh the demo cluster, its simulated nodes (with the demo faults unless healthy),
    its facility and its plans."""
    base = settings.DATA_DIR / "demo"
    paths = build_simulator(base / "sim")
    with transaction.atomic():
        cluster, created = Cluster.objects.update_or_create(
            name="demo",
            defaults={
                "customer": "Demo customer",
                "site": "Simulated, on this host",
                "profile": "H100-SXM-8",
                "transport": "local",
                "threshold_overrides": {"gpu_inventory": {"expected_driver": DEMO_DRIVER}},
            },
        )
        for position, hostname in enumerate(DEMO_NODES, start=1):
            state_file = base / "nodes" / hostname / "state"
            state_file.parent.mkdir(parents=True, exist_ok=True)
            faults = {} if healthy else DEMO_FAULTS.get(hostname, {})
            # Every demo node runs on this host: each gets its own loopback address, so the node
            # pairs of rdma-bw (a perftest server on every node, same ports) do not collide.
            address = f"127.0.0.{position + 1}"
            write_state(state_file, node=hostname, listen_address=address, **faults)
            Node.objects.update_or_create(
                cluster=cluster,
                hostname=hostname,
                defaults={
                    "rack": next(r for r, members in DEMO_RACKS.items() if hostname in members),
                    "position": str(position),
                    "local_env": node_env(paths, state_file),
                    "address": address,
                    # As a site imports them from its asset list (CSV, NetBox): the triage's RMA
                    # text and the certificate name the chassis.
                    "serial": demo_serial(position),
                },
            )
        outside = demo_facility_ensure(cluster=cluster, racks=DEMO_RACKS)
    acceptance = fast_plan_ensure(slug="demo-acceptance", name="Acceptance (demo speed)")
    plan_with_soak(acceptance)
    fast_plan_ensure(slug="demo-power-cooling", name="Power and cooling (demo speed)", source="power-cooling")
    # The plan pickers list (and preselect) the demo's own acceptance, and estimate at simulator speed.
    Cluster.objects.filter(pk=cluster.pk).update(acceptance_plan=acceptance, check_overhead_s=DEMO_CHECK_OVERHEAD_S)
    return DemoSeeded(created=created, outside=outside)
