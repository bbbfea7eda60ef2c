"""kiln_run on the 8-node sshd testbed, executed by a real Celery worker over real SSH."""

from __future__ import annotations

import io
import json
import subprocess
import time
from pathlib import Path

import pytest
from django.core.management import call_command

from portal.runs.models import CheckResult, Run

pytestmark = pytest.mark.integration


def kiln_run_json(*args: str) -> tuple[int, dict]:
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_info:
        call_command("kiln_run", *args, "--wait", "--json", "--timeout", "180", stdout=out, stderr=io.StringIO())
    return exit_info.value.code, json.loads(out.getvalue())


def processes_in_netns(netns: str) -> set[str]:
    pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=True).stdout.split()
    names = set()
    for pid in pids:
        try:
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            pass  # exited meanwhile
    return names


# The nodes of the testbed given no fault in the failure-mode run.
HEALTHY = ("gpu01", "gpu03", "gpu06", "gpu08")


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

    code, data = kiln_run_json("tb", "itest")

    assert code == 1, "gpu02's proven fault makes the exit code 1, beside the errors"
    ecc = by_node(data, "ecc-health")
    inventory = by_node(data, "gpu-inventory")
    for healthy in HEALTHY:
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

    # The hung probe was cut by its own 5 s budget (the plan's timeout_s), not by a worker limit...
    results = CheckResult.objects.filter(run_id=data["run"])
    gpu05 = results.get(node__hostname="gpu05", item_key="gpu-inventory")
    assert "timed out after 5s" in gpu05.reason, gpu05.reason
    # ...and it held up no other node: the healthy nodes' checks ran while it was held (their
    # intervals overlap its own, claim to finish) and all finished before it did. Run one node after
    # another, gpu06 and gpu08 would start after gpu05 finished. Recorded timestamps are compared,
    # not durations.
    hung_from, hung_to = gpu05.started_at, gpu05.finished_at
    healthy = list(results.filter(node__hostname__in=HEALTHY).values_list("started_at", "finished_at"))
    assert len(healthy) == 2 * len(HEALTHY)
    assert all(finished < hung_to for _, finished in healthy), (hung_from, hung_to)
    assert any(finished > hung_from for _, finished in healthy), "no healthy check overlapped the hung one"
    # ...and the hung probe was killed on the node itself: nothing but sshd is left in its namespace.
    # (polled briefly: a killed process takes a moment to leave the process table)
    deadline = time.monotonic() + 10
    while not processes_in_netns(tb.node("gpu05").netns) <= {"sshd"} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_in_netns(tb.node("gpu05").netns) <= {"sshd"}
    closed = Run.objects.get(pk=data["run"])
    assert closed.status == "fail" and "error" in closed.reason, closed.reason  # the errors still counted


def test_it_exits_zero_when_every_node_passes(testbed_cluster, celery_worker_process) -> None:
    code, data = kiln_run_json("tb", "itest", "--nodes", "gpu[01-03]")
    assert code == 0
    assert {r["node"] for r in data["results"]} == {"gpu01", "gpu02", "gpu03"}
    assert {r["status"] for r in data["results"]} == {"pass"}
    inventory = by_node(data, "gpu-inventory")["gpu01"]
    uuids = [m for m in inventory["measurements"] if m["name"] == "gpu_uuid"]
    assert len(uuids) == 8


def test_it_reaches_nodes_through_a_jump_host(testbed_cluster, clean_testbed, celery_worker_process) -> None:
    jump = clean_testbed.node("gpu01")
    testbed_cluster.jump_host = f"root@{jump.address}"
    testbed_cluster.save()
    code, data = kiln_run_json("tb", "itest", "--nodes", "gpu[02-03]")
    assert code == 0, data
    assert {r["status"] for r in data["results"]} == {"pass"}


def test_it_refuses_a_node_whose_pinned_fingerprint_differs(
    testbed_cluster, clean_testbed, celery_worker_process
) -> None:
    testbed_cluster.nodes.filter(hostname="gpu03").update(host_key_fingerprint="SHA256:" + "A" * 43)
    code, data = kiln_run_json("tb", "itest", "--nodes", "gpu[02-03]")
    assert code == 2
    gpu03 = by_node(data, "ecc-health")["gpu03"]
    assert gpu03["status"] == "error"
    assert "pinned SHA256:AAAA" in gpu03["reason"]
    assert by_node(data, "ecc-health")["gpu02"]["status"] == "pass"


def test_it_fills_the_grid_live_for_a_run_started_from_the_web_page(
    testbed_cluster, clean_testbed, celery_worker_process, client, make_user
) -> None:
    import re

    client.force_login(make_user("olivia", "operator"))
    for node in clean_testbed.nodes:
        clean_testbed.set_faults(node.hostname, delay_ms=400)
    clean_testbed.set_faults("gpu06", delay_ms=400, ecc_uncorrectable_gpu=2)
    response = client.post("/clusters/tb/run/", {"plan": "itest", "node_set": ""})
    assert response.status_code == 302
    run_url = response["Location"]
    page = client.get(run_url)
    assert b'hx-trigger="every 2s"' in page.content, "an active run's grid polls for updates"

    seen_states: list[str] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        fragment = client.get(run_url, HTTP_HX_REQUEST="true").content.decode()
        assert "<html" not in fragment, "htmx gets the grid fragment, not the whole page"
        seen_states.append(re.search(r'data-status="(\w+)"', fragment).group(1))
        if "hx-trigger" not in fragment:
            break
        time.sleep(0.3)
    assert seen_states[-1] == "fail", seen_states
    assert {"queued", "running"} & set(seen_states), "the grid was seen before the run finished"
    assert "GPU 2: 2 uncorrectable volatile ECC errors" in fragment
    assert fragment.count('class="cell pass"') == 15

    result = CheckResult.objects.get(run__cluster=testbed_cluster, node__hostname="gpu06", item_key="ecc-health")
    detail = client.get(f"/results/{result.pk}/").content.decode()
    ecc_table = client.get(f"/results/{result.pk}/charts/ecc/").content.decode()  # loaded after the page
    assert "volatile uncorr." in ecc_table and "ecc_volatile_uncorrected" not in detail  # shown once
    assert "python3 - &lt; probe.py" in detail
    assert '"schema": 1' in detail or "&quot;schema&quot;: 1" in detail, "the raw probe output is shown"
