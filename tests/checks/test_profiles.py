"""Hardware profiles and threshold/param resolution."""

from __future__ import annotations

import pytest

from checks.core.base import ParamsError
from checks.core.profiles import PROFILES, HardwareProfile, get_profile, resolve_params, resolve_thresholds


def test_it_has_the_four_profiles() -> None:
    assert set(PROFILES) == {"H100-SXM-8", "H200-SXM-8", "A100-SXM-8", "generic"}
    assert all(isinstance(p, HardwareProfile) and p.key == k for k, p in PROFILES.items())


def test_it_knows_the_hgx_shapes() -> None:
    assert get_profile("H100-SXM-8").gpu_count == 8
    assert get_profile("H100-SXM-8").gpu_models == ("NVIDIA H100 80GB HBM3",)
    assert get_profile("H200-SXM-8").gpu_models == ("NVIDIA H200",)
    assert "NVIDIA A100-SXM4-80GB" in get_profile("A100-SXM-8").gpu_models
    assert get_profile("generic").gpu_count is None


def test_it_names_the_known_profiles_on_an_unknown_key() -> None:
    with pytest.raises(KeyError, match="known: A100-SXM-8, H100-SXM-8, H200-SXM-8, generic"):
        get_profile("B200-SXM-8")


def test_it_resolves_check_defaults_without_a_profile() -> None:
    t = resolve_thresholds("ecc_health", None)
    assert t["max_volatile_uncorrected"] == 0
    assert t["max_aggregate_uncorrected"] is None
    assert t["require_ecc_enabled"] is True
    assert resolve_thresholds("gpu_inventory", None)["expected_gpu_count"] is None


def test_it_takes_inventory_expectations_from_the_profile() -> None:
    t = resolve_thresholds("gpu_inventory", "A100-SXM-8")
    assert t == {
        "expected_gpu_count": 8,
        "expected_models": "NVIDIA A100-SXM4-80GB,NVIDIA A100-SXM4-40GB",
        "expected_driver": "",
        "min_driver": "450.36.06",
    }


def test_it_lets_later_overrides_win() -> None:
    t = resolve_thresholds("gpu_inventory", "H100-SXM-8", {"expected_gpu_count": 4}, None, {"expected_gpu_count": 2})
    assert t["expected_gpu_count"] == 2
    assert t["expected_models"] == "NVIDIA H100 80GB HBM3"


def test_it_treats_none_in_an_override_as_a_real_setting() -> None:
    t = resolve_thresholds("ecc_health", "H100-SXM-8", {"max_volatile_uncorrected": None})
    assert t["max_volatile_uncorrected"] is None


def test_it_coerces_strings_from_forms() -> None:
    t = resolve_thresholds("ecc_health", None, {"max_aggregate_uncorrected": "3", "allow_remap_pending": "yes"})
    assert t["max_aggregate_uncorrected"] == 3
    assert t["allow_remap_pending"] is True


def test_it_rejects_unknown_keys_naming_them() -> None:
    with pytest.raises(ParamsError, match="unknown threshold\\(s\\): max_ecc; expected one of: "):
        resolve_thresholds("ecc_health", "H100-SXM-8", {"max_ecc": 1})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_volatile_uncorrected", "many"),
        ("max_aggregate_uncorrected", "lots"),  # None default: typed from the annotation
        ("max_aggregate_uncorrected", 1.5),
        ("require_ecc_enabled", "maybe"),
        ("max_retired_pages", True),
    ],
)
def test_it_rejects_badly_typed_values(key: str, value: object) -> None:
    with pytest.raises(ParamsError, match=key):
        resolve_thresholds("ecc_health", None, {key: value})


def test_it_rejects_negative_limits() -> None:
    with pytest.raises(ParamsError, match="max_volatile_uncorrected"):
        resolve_thresholds("ecc_health", None, {"max_volatile_uncorrected": -1})


def test_it_rejects_a_non_string_model_list() -> None:
    with pytest.raises(ParamsError, match="expected_models"):
        resolve_thresholds("gpu_inventory", None, {"expected_models": ["a", "b"]})


def test_it_resolves_params_the_same_way() -> None:
    assert resolve_params("ecc_health", "H100-SXM-8") == {"timeout_s": 60}
    assert resolve_params("gpu_inventory", None, {"timeout_s": "90"}) == {"timeout_s": 90}
    with pytest.raises(ParamsError, match="unknown param"):
        resolve_params("gpu_inventory", None, {"timeout": 5})


def test_it_rejects_an_unknown_check_or_profile() -> None:
    with pytest.raises(KeyError, match="unknown check kind"):
        resolve_thresholds("nccl_allreduce_x", None)
    with pytest.raises(KeyError, match="unknown hardware profile"):
        resolve_thresholds("ecc_health", "H100")
