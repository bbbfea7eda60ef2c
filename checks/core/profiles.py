"""Hardware profiles: what a node of a given kind must look like, and the
default thresholds for it. Every number carries its source.

Resolution order for a check's thresholds (and params), later wins:
check defaults < profile < overrides (plan item, cluster, ...).
See `resolve_thresholds` / `resolve_params`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from checks.core.base import ParamsError, get_check


def _check_class(check_key: str) -> Any:
    from checks.core.base import REGISTRY

    cls = REGISTRY.get(check_key)
    if cls is None:
        raise KeyError(f"unknown check kind {check_key!r}")
    return cls


@dataclass(frozen=True)
class HardwareProfile:
    """One kind of node: GPU count and models, driver floor, threshold overrides.

    `thresholds` / `params` map a check key to the values this profile sets on
    top of the check's own defaults. The inventory expectations (count, models,
    driver floor) are derived from the profile's own fields, so they are
    stated once."""

    key: str
    name: str
    gpu_count: int | None
    gpu_models: tuple[str, ...]
    min_driver: str | None
    thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    description: str = ""

    def thresholds_for(self, check_key: str) -> dict[str, Any]:
        values: dict[str, Any] = {}
        if check_key == "gpu_inventory":
            values["expected_gpu_count"] = self.gpu_count
            values["expected_models"] = ",".join(self.gpu_models)
            values["min_driver"] = self.min_driver or ""
        values.update(_check_class(check_key).profile_thresholds.get(self.key, {}))
        values.update(self.thresholds.get(check_key, {}))
        return values

    def params_for(self, check_key: str) -> dict[str, Any]:
        values = dict(_check_class(check_key).profile_params.get(self.key, {}))
        values.update(self.params.get(check_key, {}))
        return values


PROFILES: dict[str, HardwareProfile] = {
    p.key: p
    for p in (
        HardwareProfile(
            key="H100-SXM-8",
            name="HGX/DGX H100 SXM5, 8 GPUs",
            # DGX H100 user guide / HGX H100 spec: 8x H100 SXM5 per baseboard.
            gpu_count=8,
            # NVML product name of the H100 SXM5 80GB (nvidia-smi "Product Name" on HGX H100).
            gpu_models=("NVIDIA H100 80GB HBM3",),
            # CUDA 11.8 release notes: first toolkit with Hopper (sm_90); its
            # minimum Linux driver is 520.61.05 (CUDA toolkit/driver compatibility table).
            min_driver="520.61.05",
            # ECC: the check's defaults (zero volatile uncorrectable, no pending/failed
            # remap) already follow NVIDIA's GPU memory error management docs for Hopper.
            thresholds={},
        ),
        HardwareProfile(
            key="H200-SXM-8",
            name="HGX H200 SXM, 8 GPUs",
            # NVIDIA HGX H200 spec: 8x H200 SXM 141GB per baseboard.
            gpu_count=8,
            # NVML product name of the H200 SXM (nvidia-smi "Product Name" on HGX H200).
            gpu_models=("NVIDIA H200",),
            # Not pinned: H200 board support arrived in later R535/R550 data center
            # drivers than the Hopper floor above; pin the site's tested driver per cluster.
            min_driver=None,
            thresholds={},
        ),
        HardwareProfile(
            key="A100-SXM-8",
            name="HGX/DGX A100 SXM4, 8 GPUs",
            # DGX A100 user guide / HGX A100 spec: 8x A100 SXM4 per baseboard.
            gpu_count=8,
            # NVML product names of the A100 SXM4 40GB and 80GB boards (nvidia-smi -q -x
            # fixture nvsmi_q_x_A100-SXM4-80GB_MIG_drv535.xml shows "NVIDIA A100-SXM4-80GB").
            gpu_models=("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB"),
            # CUDA 11.0 release notes: first toolkit with Ampere (sm_80); its minimum
            # Linux driver is 450.36.06 (CUDA toolkit/driver compatibility table).
            min_driver="450.36.06",
            thresholds={},
        ),
        HardwareProfile(
            key="generic",
            name="Generic NVIDIA node",
            description="No count or model expectations: inventory records what it finds, ECC uses check defaults.",
            # Unknown hardware: expect at least one GPU, no fixed count (the node's own
            # expected_gpus, when set, still applies).
            gpu_count=None,
            gpu_models=(),
            min_driver=None,
            thresholds={},
        ),
    )
}


def get_profile(key: str) -> HardwareProfile:
    try:
        return PROFILES[key]
    except KeyError:
        raise KeyError(f"unknown hardware profile {key!r}; known: {', '.join(sorted(PROFILES))}") from None


def resolve_thresholds(check_key: str, profile_key: str | None, *overrides: dict[str, Any] | None) -> dict[str, Any]:
    """Check defaults < profile < each override in order; returns a validated dict.

    A key present in an override wins even when its value is None: None is a
    real setting for thresholds ("don't judge"). To inherit, leave the key out.
    Unknown keys or badly typed values raise ParamsError naming the key."""
    check = get_check(check_key)
    profile = get_profile(profile_key) if profile_key else None
    merged = _merge(check.default_thresholds(), profile.thresholds_for(check_key) if profile else {}, overrides)
    return dataclasses.asdict(check.make_thresholds(merged))


def resolve_params(check_key: str, profile_key: str | None, *overrides: dict[str, Any] | None) -> dict[str, Any]:
    """Same as resolve_thresholds, for params."""
    check = get_check(check_key)
    profile = get_profile(profile_key) if profile_key else None
    merged = _merge(check.default_params(), profile.params_for(check_key) if profile else {}, overrides)
    return dataclasses.asdict(check.make_params(merged))


def _merge(
    defaults: dict[str, Any], profile: dict[str, Any], overrides: tuple[dict[str, Any] | None, ...]
) -> dict[str, Any]:
    merged = {**defaults, **profile}
    for layer in overrides:
        if layer is None:
            continue
        if not isinstance(layer, dict):
            raise ParamsError(f"overrides must be a mapping, got {type(layer).__name__}")
        merged.update(layer)
    return merged
