"""Param overrides that make the built-in plans run in seconds on the simulated testbed."""

from __future__ import annotations

from portal.catalog.models import TestPlan

FAST_PARAMS: dict[str, dict] = {
    "nccl-allreduce": {"min_bytes": "1M", "max_bytes": "1G", "peak_min_bytes": "512M", "iters": 5, "warmup_iters": 1},
    "nccl-allreduce-multi": {
        "min_bytes": "1M",
        "max_bytes": "1G",
        "peak_min_bytes": "512M",
        "iters": 5,
        "warmup_iters": 1,
    },
    "burn-in": {"duration_s": 3, "sample_interval_s": 0.5},
    "dlc-temperature": {"idle_s": 2, "load_s": 3, "sensor_source": "ipmitool"},
    "fs-throughput": {"size": "64M", "numjobs": 2},
    "fs-aggregate": {"size": "64M", "numjobs": 2},
}


def make_acceptance_fast(plan: TestPlan) -> None:
    for item in plan.items.select_related("check_definition"):
        fast = FAST_PARAMS.get(item.check_definition.slug)
        if fast:
            item.param_overrides = {**item.param_overrides, **fast}
            item.save(update_fields=["param_overrides"])
