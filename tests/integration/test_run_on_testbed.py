"""kiln_run on the 8-node sshd testbed, executed by a real Celery worker over real SSH."""

from __future__ import annotations

import io
import json
import time

import pytest
from django.core.management import call_command

from portal.runs.models import CheckResult, Run

pytestmark = pytest.mark.integration


def kiln_run_json(*args: str) -> tuple[int, dict]:
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_info:
        call_command("kiln_run", *args, "--json", "--timeout", "180", stdout=out, stderr=io.StringIO())
    return exit_info.value.code, json.loads(out.getvalue())


def by_node(data: dict, check: str) -> dict[str, dict]:
    return {r["node"]: r for r in data["results"] if r["check"] == check}


def test_it_runs_the_plan_on_the_testbed_with_every_failure_mode(
    testbed_cluster, clean_testbed, celery_worker_process
) -> None:
    tb = clean_testbed
    tb.set_faults("gpu02", ecc_uncorrectable_gpu=3)
    tb.stop_sshd("gpu04")
    tb.set_faults("gpu05", hang=1)
    tb.rotate_host_key("gpu07")

    started = time.monotonic()
    code, data = kiln_run_json("tb", "itest")
    elapsed = time.monotonic() - started

    assert code == 2, "errors make the exit code 2"
    ecc = by_node(data, "ecc-health")
    inventory = by_node(data, "gpu-inventory")
    for healthy in ("gpu01", "gpu03", "gpu06", "gpu08"):
        assert ecc[healthy]["status"] == "pass", ecc[healthy]
        assert inventory[healthy]["status"] == "pass", inventory[healthy]
        assert any(m["name"] == "ecc_volatile_uncorrected" for m in ecc[healthy]["measurements"])

    assert ecc["gpu02"]["status"] == "fail"
    assert "GPU 3" in ecc["gpu02"]["reason"]
    bad = [m for m in ecc["gpu02"]["measurements"] if m["name"] == "ecc_volatile_uncorrected" and m["value"]]
    assert [m["gpu"] for m in bad] == [3]
    assert inventory["gpu02"]["status"] == "pass"

    for check in (ecc, inventory):
        assert check["gpu04"]["status"] == "error"
        assert check["gpu04"]["reason"].startswith("unreachable")
        assert check["gpu07"]["status"] == "error"
        assert "host key mismatch" in check["gpu07"]["reason"]
    assert inventory["gpu05"]["status"] == "error"
    assert "timed out" in inventory["gpu05"]["reason"]

    # The hung node's checks ran in parallel with everything else and were cut at 5 s each.
    gpu05 = CheckResult.objects.get(run_id=data["run"], node__hostname="gpu05", item_key="gpu-inventory")
    assert 4.5 <= gpu05.duration_s < 12
    healthy_durations = CheckResult.objects.filter(run_id=data["run"], node__hostname="gpu01").values_list(
        "duration_s", flat=True
    )
    assert max(healthy_durations) < 5
    assert elapsed < 60
    assert Run.objects.get(pk=data["run"]).status == "error"


def test_it_exits_zero_when_every_node_passes(testbed_cluster, celery_worker_process) -> None:
    code, data = kiln_run_json("tb", "itest", "--nodes", "gpu[01-03]")
    assert code == 0
    assert {r["node"] for r in data["results"]} == {"gpu01", "gpu02", "gpu03"}
    assert {r["status"] for r in data["results"]} == {"pass"}
    inventory = by_node(data, "gpu-inventory")["gpu01"]
    uuids = [m for m in inventory["measurements"] if m["name"] == "gpu_uuid"]
    assert len(uuids) == 8
