"""What to do when a check fails: the remedies the kinds declare (checks/core/presentation.py Remedy)."""

from __future__ import annotations

import pytest

from checks import presentation_of
from checks.core.presentation import (
    COLD_PLATE,
    FALLBACK_REMEDY,
    REINSTALL_DRIVER,
    RESEAT_LINK,
    RMA,
    Presentation,
    Remedy,
)
from checks.gpu.xid import xid_action


@pytest.mark.parametrize(
    ("kind", "name", "action"),
    [
        ("ecc_health", "ecc_volatile_uncorrected", RMA),
        ("ecc_health", "remap_failure", RMA),
        ("gpu_inventory", "driver_version", REINSTALL_DRIVER),
        ("sw_consistency", None, REINSTALL_DRIVER),
        ("sw_consistency", "nic_firmware", REINSTALL_DRIVER),
        ("ib_ports", "port_state", RESEAT_LINK),
        ("gpu_links", "nvlinks_active", RESEAT_LINK),
        ("dlc_temperature", "temp_gpu_steady", COLD_PLATE),
        ("nccl_allreduce", "busbw_peak", FALLBACK_REMEDY.action),
        ("no_such_kind", None, FALLBACK_REMEDY.action),
    ],
)
def test_it_finds_the_remedy_a_kind_declares(kind: str, name: str | None, action: str) -> None:
    assert presentation_of(kind).remedy_for(name).action == action


def test_the_driver_remedy_says_reinstall_the_pinned_driver() -> None:
    assert "reinstall the pinned driver" in REINSTALL_DRIVER and "RMA" in RMA


def test_a_named_remedy_comes_before_the_kinds_general_one() -> None:
    p = Presentation(remedies=(Remedy("general", "look"), Remedy("named", "act", ("x",))))
    assert p.remedy_for("x").cause == "named"
    assert p.remedy_for("y").cause == "general" and p.remedy_for(None).cause == "general"


def test_the_xid_remedy_reads_the_catalogue_per_code() -> None:
    remedy = presentation_of("ecc_health").remedy_for("xid")
    assert remedy.action_for({"value": 64.0, "text": "", "labels": {"kind": "xid"}}) == "reset the GPU; RMA candidate"
    assert remedy.action_for({"value": 79.0, "text": "", "labels": {}}) == xid_action({"value": 79.0, "labels": {}})
    assert "catalog" in xid_action({"value": 99999.0, "labels": {}})
    assert "catalog" in xid_action({"value": None, "labels": {}})
    sxid = presentation_of("ecc_health").remedy_for("sxid")
    assert sxid.cause == "xid"
    assert (
        sxid.action_for({"value": 20034.0, "text": "", "labels": {"kind": "sxid"}}) == "check the NVLink / trunk link"
    )
