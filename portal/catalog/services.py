"""Writes for the check catalog: the built-in definitions and plans, with stable slugs."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

# slug -> (kind, name, description). A new check adds its line here and to the plans below.
BUILTIN_CHECKS: dict[str, tuple[str, str, str]] = {
    "gpu-inventory": (
        "gpu_inventory",
        "GPU inventory",
        "GPU count, model and driver match the profile, and every node agrees with its peers.",
    ),
    "sw-consistency": (
        "sw_consistency",
        "Software and firmware",
        "Driver, CUDA, VBIOS, kernel, OS and NIC firmware; the odd node out is flagged.",
    ),
    "gpu-links": ("gpu_links", "GPU links", "PCIe generation and width, NVLink status."),
    "ib-ports": ("ib_ports", "InfiniBand ports", "Expected count of active ports at the expected rate."),
    "rdma-bw": (
        "rdma_bw",
        "RDMA bandwidth per rail",
        "perftest ib_write_bw/ib_write_lat from every HCA to the same HCA of the next node; names a slow port or pair.",
    ),
    "nccl-allreduce": (
        "nccl_allreduce",
        "NCCL all-reduce (node)",
        "nccl-tests all_reduce_perf over the node's GPUs: peak bus bandwidth at large sizes, #wrong.",
    ),
    "burn-in": (
        "burn_in",
        "Burn-in",
        "gpu_burn under NVML telemetry: errors, Gflop/s, throttling, new ECC errors.",
    ),
    "dlc-temperature": (
        "dlc_temperature",
        "DLC temperature",
        "Idle and under-load temperatures vs the slowdown threshold, sibling delta, coolant sensors.",
    ),
    "fs-throughput": ("fs_throughput", "Filesystem (node)", "fio sequential write and read per node."),
    "ecc-health": (
        "ecc_health",
        "ECC and Xid",
        "No uncorrectable ECC errors, no pending or failed row remap, ECC enabled, no Xid since the run began.",
    ),
    "nccl-allreduce-multi": (
        "nccl_allreduce_multi",
        "NCCL all-reduce (across nodes)",
        "all_reduce_perf across the run's nodes from a launcher; a slow run is bisected to the node at fault.",
    ),
    "nccl-alltoall-multi": (
        "nccl_alltoall_multi",
        "NCCL all-to-all (across nodes)",
        "alltoall_perf across the run's nodes (expert-parallel traffic, the fabric's bisection) against a "
        "per-GPU network floor; a slow run is bisected to the node at fault.",
    ),
    "fs-aggregate": (
        "fs_aggregate",
        "Filesystem (aggregate)",
        "fio on every node at once (client/server); aggregate bandwidth and the slow node.",
    ),
    "fs-metadata": (
        "fs_metadata",
        "Filesystem metadata (node)",
        "mdtest per node: small-file create, stat, read and remove rates against the filesystem class's floors.",
    ),
    "fs-metadata-aggregate": (
        "fs_metadata_aggregate",
        "Filesystem metadata (aggregate)",
        "One mdtest across every node at once (mpirun): the metadata service's rates under the whole load.",
    ),
    "dcgm-diag": ("dcgm_diag", "DCGM diagnostics", "dcgmi diag; Skip and Not Run are never a pass."),
    "power-soak": (
        "power_soak",
        "Power and cooling heat soak",
        "Every node burns all GPUs at once: node, rack, PDU phase, A/B feed, UPS and cooling loop "
        "judged against the facility model.",
    ),
    "gpu-power-limit": (
        "gpu_power_limit",
        "GPU power limit",
        "Each GPU's enforced power limit is at least its rated board power (no leftover cap).",
    ),
    "gpu-config": (
        "gpu_config",
        "GPU node configuration",
        "Persistence, MIG, application clocks, NVSwitch fabric and fabric manager, PCIe ACS off and IOMMU mode.",
    ),
    "topology": (
        "topology",
        "GPU-NIC topology",
        "Each GPU's nearest NIC on the PCIe tree (nvidia-smi topo -m) within the allowed link; "
        "the odd node out is flagged.",
    ),
    "host-bw": (
        "host_bw",
        "Host and peer copy bandwidth",
        "nvbandwidth copy-engine memcpy: host-to-device and device-to-host per GPU (a slow one is named "
        "with its PCIe link), and GPU-to-GPU copies per pair.",
    ),
    "slurm-container": (
        "slurm_container",
        "Slurm container path",
        "srun with the site's pyxis/enroot image (param image): every GPU, its UUID and the host's driver "
        "inside the container, and a short NCCL run there.",
    ),
}

# Plan slug -> (name, description, [(check slug, param overrides)]) in order. `quick` holds the
# fast checks; `acceptance` is the full plan. ECC/Xid runs after the load checks in acceptance, so
# errors and Xids raised under load are caught. Built-in plans are kept in sync on every migrate:
# copy one to customise it.
BUILTIN_PLANS: dict[str, tuple[str, str, list[tuple[str, dict[str, Any]]]]] = {
    "quick": (
        "Quick sweep",
        "Fast health checks for nightly sweeps (built in; copy it to customise).",
        [
            ("gpu-inventory", {}),
            ("sw-consistency", {}),
            ("ecc-health", {}),
            ("gpu-links", {}),
            ("ib-ports", {}),
            # Idle temperatures only: a sweep on a cluster in service starts no load.
            ("dlc-temperature", {"idle_s": 5, "load_s": 0}),
            # A short run: fewer iterations at every size; the sizes still reach the peak plateau.
            ("nccl-allreduce", {"iters": 5, "warmup_iters": 2}),
        ],
    ),
    "acceptance": (
        "Acceptance",
        "The full acceptance plan for handover (built in; copy it to customise).",
        [
            ("gpu-inventory", {}),
            ("sw-consistency", {}),
            # How the node is set up for GPU work (fabric, ACS, IOMMU, clocks) and wired
            # (each GPU's NIC on its own PCIe switch), before any load runs on it.
            ("gpu-config", {}),
            ("topology", {}),
            ("gpu-links", {}),
            ("host-bw", {}),
            ("ib-ports", {}),
            # Every rail's RDMA bandwidth and latency, each HCA to its peer on the next node.
            ("rdma-bw", {}),
            ("nccl-allreduce", {}),
            # 12 h at full tensor-core load: infant-mortality burn-in before handover.
            ("burn-in", {"duration_s": 43200, "use_tensor_cores": True}),
            ("dlc-temperature", {}),
            ("fs-throughput", {}),
            # Data loading is small files: metadata rates per node.
            ("fs-metadata", {}),
            ("ecc-health", {}),
            ("nccl-allreduce-multi", {}),
            # Expert-parallel traffic, the test of the fabric's bisection.
            ("nccl-alltoall-multi", {}),
            ("fs-aggregate", {}),
        ],
    ),
    # The integrated systems test of power and cooling, run once the facility model
    # (racks, PDUs, UPS, loops) is entered; separate from node acceptance because it needs every
    # node at once and the facility's own people on site.
    "power-cooling": (
        "Power and cooling",
        "Whole-cluster heat soak against the facility model (built in; copy it to customise).",
        [("power-soak", {})],
    ),
}


# The acceptance plan at simulator speed: seconds per check instead of hours (the demo cluster's
# `demo-acceptance` plan, and the integration tests).
FAST_PARAMS: dict[str, dict[str, Any]] = {
    "nccl-allreduce": {"min_bytes": "1M", "max_bytes": "1G", "peak_min_bytes": "512M", "iters": 5, "warmup_iters": 1},
    "nccl-allreduce-multi": {
        "min_bytes": "1M",
        "max_bytes": "1G",
        "peak_min_bytes": "512M",
        "iters": 5,
        "warmup_iters": 1,
    },
    "nccl-alltoall-multi": {
        "min_bytes": "1M",
        "max_bytes": "1G",
        "peak_min_bytes": "512M",
        "iters": 5,
        "warmup_iters": 1,
    },
    "burn-in": {"duration_s": 3, "sample_interval_s": 0.5},
    # 5 s of load: the simulated GPUs ramp to steady load in 1.5 s (testbed/sim/fake_nvml.c), and the
    # check judges the last part of the load samples; 3 s left too few steady samples when the
    # machine was busy (a hot GPU judged on its ramp passed).
    "dlc-temperature": {"idle_s": 2, "load_s": 5, "sensor_source": "ipmitool"},
    "fs-throughput": {"size": "64M", "numjobs": 2},
    "fs-aggregate": {"size": "64M", "numjobs": 2},
    # The simulated ib_write_lat answers at once: its window need not cover CUDA start-up (the
    # servers' start slack stays at its default, so a busy worker still has every server listening).
    "rdma-bw": {"lat_timeout_s": 8, "bw_timeout_s": 30},
    # 60 samples at the check's default 1 Hz (checks/power_soak.py): the judge needs 54 (90% coverage,
    # at least 40: checks/power_soak_data.py), 15 in the steady window. The BMC readings are a compiled simulator
    # (testbed/sim/fake_ipmitool.c, ~1 ms of CPU each): the Python one (~50 ms each) lost up to 15% of
    # the readings of eight nodes at 1 Hz on a busy 2-core machine, so the demo had sampled every 2 s.
    "power-soak": {"duration_s": 60, "sample_interval_s": 1.0},
}


@transaction.atomic
def fast_plan_ensure(*, slug: str, name: str, source: str = "acceptance") -> TestPlan:
    """A copy of a built-in plan with FAST_PARAMS applied (for simulated clusters)."""
    base = TestPlan.objects.get(slug=source)
    plan, _ = TestPlan.objects.update_or_create(
        slug=slug, defaults={"name": name, "description": f"{base.name} at simulator speed.", "builtin": False}
    )
    plan.items.all().delete()
    for item in base.items.select_related("check_definition").order_by("order"):
        TestPlanItem.objects.create(
            plan=plan,
            check_definition=item.check_definition,
            order=item.order,
            param_overrides={**item.param_overrides, **FAST_PARAMS.get(item.check_definition.slug, {})},
            threshold_overrides=item.threshold_overrides,
        )
    return plan


@transaction.atomic
def builtin_catalog_ensure() -> None:
    """Create or refresh the built-in definitions and plans. Idempotent; user plans are untouched."""
    definitions: dict[str, CheckDefinition] = {}
    for slug, (kind, name, description) in BUILTIN_CHECKS.items():
        definition, _ = CheckDefinition.objects.update_or_create(
            slug=slug, defaults={"kind": kind, "name": name, "description": description, "builtin": True}
        )
        definitions[slug] = definition
    for slug, (name, description, items) in BUILTIN_PLANS.items():
        plan, _ = TestPlan.objects.update_or_create(
            slug=slug, defaults={"name": name, "description": description, "builtin": True}
        )
        wanted = {check_slug for check_slug, _ in items}
        plan.items.exclude(check_definition__slug__in=wanted).delete()
        for order, (check_slug, params) in enumerate(items):
            TestPlanItem.objects.update_or_create(
                plan=plan,
                check_definition=definitions[check_slug],
                defaults={"order": order, "param_overrides": params},
            )
