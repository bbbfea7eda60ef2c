"""The built-in catalog is read from the check classes: one definition per catalogued kind, with
the slug, name and description its class declares, and simulator-speed plans from each class's
`simulator_params`."""

from __future__ import annotations

from typing import ClassVar

import pytest

from checks.core.base import REGISTRY, Check, by_slug, catalogued, register, simulator_params
from portal.catalog.models import CheckDefinition, TestPlan
from portal.catalog.services import builtin_catalog_ensure, fast_plan_ensure

# Slugs released before the catalog was read from the classes: databases hold definitions by these,
# so none may change (a renamed slug would leave the old row and add a new one).
RELEASED_SLUGS = {
    "gpu-inventory", "sw-consistency", "gpu-links", "ib-ports", "rdma-bw", "nccl-allreduce", "burn-in",
    "dlc-temperature", "fs-throughput", "ecc-health", "nccl-allreduce-multi", "nccl-alltoall-multi",
    "fs-aggregate", "fs-metadata", "fs-metadata-aggregate", "dcgm-diag", "power-soak", "gpu-power-limit",
    "gpu-config", "topology", "host-bw", "slurm-container",
}  # fmt: skip


def test_released_slugs_still_name_the_same_kinds() -> None:
    assert RELEASED_SLUGS <= {c.slug for c in catalogued()}
    assert by_slug("burn-in") is REGISTRY["burn_in"]
    assert by_slug("no-such-check") is None


@pytest.mark.django_db
def test_every_catalogued_kind_has_its_builtin_definition() -> None:
    builtin_catalog_ensure()
    rows = {d.slug: d for d in CheckDefinition.objects.filter(builtin=True)}
    assert set(rows) == {c.slug for c in catalogued()}
    for cls in catalogued():
        row = rows[cls.slug]
        assert (row.kind, row.name, row.description) == (cls.key, cls.name, cls.description)
        assert row.name and row.description, cls.key


@pytest.mark.django_db
def test_a_kind_that_is_not_catalogued_gets_no_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    CheckDefinition.objects.filter(slug="dcgm-diag").delete()
    monkeypatch.setattr(REGISTRY["dcgm_diag"], "catalogued", False)
    builtin_catalog_ensure()
    assert not CheckDefinition.objects.filter(slug="dcgm-diag").exists()
    assert CheckDefinition.objects.filter(slug="burn-in").exists()


@pytest.mark.django_db
def test_a_plan_at_simulator_speed_takes_each_class_params() -> None:
    builtin_catalog_ensure()
    plan = fast_plan_ensure(slug="acceptance-sim", name="Acceptance (simulator)")
    items = {i.check_definition.slug: i.param_overrides for i in plan.items.select_related("check_definition")}
    base = {i.check_definition.slug: i.param_overrides for i in TestPlan.objects.get(slug="acceptance").items.all()}
    assert items["burn-in"] == {**base["burn-in"], **REGISTRY["burn_in"].simulator_params}
    assert items["nccl-allreduce-multi"] == REGISTRY["nccl_allreduce_multi"].simulator_params
    assert items["gpu-inventory"] == {}
    assert simulator_params("gpu-inventory") == {} and simulator_params("no-such-check") == {}


def test_simulator_params_are_valid_params_of_their_kind() -> None:
    for cls in REGISTRY.values():
        cls.make_params({**cls.default_params(), **cls.simulator_params})


def test_register_derives_the_slug_and_refuses_a_taken_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("checks.core.base.REGISTRY", dict(REGISTRY))

    class Probe(Check):
        key: ClassVar[str] = "catalog_probe_test"
        name: ClassVar[str] = "Probe"
        Params: ClassVar[type] = dict
        Thresholds: ClassVar[type] = dict

    assert register(Probe).slug == "catalog-probe-test"

    class Clash(Check):
        key: ClassVar[str] = "burn_in_again"
        slug: ClassVar[str] = "burn-in"
        name: ClassVar[str] = "Clash"

    with pytest.raises(ValueError, match="slug 'burn-in' is already 'burn_in'"):
        register(Clash)
