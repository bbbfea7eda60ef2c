"""The heat soak on a 12-node sshd testbed with 3 racks, 6 PDUs and one loop: a real Celery worker
starts gpu_burn under the probe on every node at one moment over SSH, reads the nodes' BMC power
(simulated `ipmitool dcmi power reading`), and samples the PDUs and the
CDU over Redfish from the testbed's facility service, which runs in a namespace of its own (gpu13)
and whose readings follow the nodes' simulated load.

A healthy site passes. With the four planted faults at once (a node drawing 30% over its GPUs, a
PDU phase overloaded by mis-cabling, a CDU at 30% flow, a UPS too small for 120% of the peak), the
soak fails exactly those four subjects, each with a reason naming it and its numbers. The planted
endpoint password appears in no page, log line or export.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from portal.runs.models import CheckResult, Measurement
from testbed.facility_service import FacilityService, start_facility

# Real-time readings judged on a deadline: beside other such tests, never at once (tests/conftest.py).
pytestmark = [pytest.mark.integration, pytest.mark.exclusive("cpu")]

NODES = 12
RACKS = ("r1", "r2", "r3")
SECRET = "planted-facility-s3cret-7f3a"
USER = "facility"
# A simulated node under gpu_burn draws ~6.9 kW (8 x ~670 W + 1.5 kW platform: testbed/sim/power.py).
# Per phase of a PDU, with every node on 6 PSUs (1/6 on each phase of A and B): 4 x 6.9 kW / 6 =
# 4.6 kW = 21 A at 230 V, under 80% of a 63 A breaker (50.4 A); one feed alone carries
# 3 x 230 V x 50.4 A x PF 0.95 = 33 kW, above a rack's 27.6 kW peak (the failover case).
BREAKER_A = 63.0
# 12 x 6.9 kW = 83 kW peak; 120% of it is 99 kW.
UPS_HEALTHY_KW, UPS_SMALL_KW = 150.0, 90.0
# One sample every 2 s: twelve nodes sampling every second on a 2-core CI machine under xdist lost up
# to a quarter of their readings (34-39 of 45, below the 90% coverage the judge requires), a failure
# of the test machine, not of the site. 40 s gives 20-21 time points: the judge's floor of 40 readings
# (sized for 1 Hz over the default 30 min) is lowered to 18 for this short soak, still 90% coverage
# and the last 10 s as the steady window, well past the simulated load's 1.5 s ramp
# (testbed/sim/power.py).
SOAK_PARAMS = {"duration_s": 40, "sample_interval_s": 2.0}
SOAK_THRESHOLDS = {"min_samples": 18}
# Three of rack r2's nodes cabled onto phase 2 of r2-a: (3 x 1/2 + 1/6) x 6.9 kW = 11.5 kW = 52 A.
OVER_DRAWING, MISCABLED_PDU, MISCABLED_NODES = "gpu03", "r2-a", ["gpu05", "gpu06", "gpu07"]


def host(i: int) -> str:
    return f"gpu{i:02d}"


def rack_of(i: int) -> str:
    return RACKS[(i - 1) // 4]


def sim_config(*, faults: bool) -> dict[str, Any]:
    """The facility service's own view (testbed/sim/facility.py): the same PDUs, feeds and loop."""
    pdus = []
    for r, rack in enumerate(RACKS):
        for feed in ("a", "b"):
            ident = f"{rack}-{feed}"
            hosts = [host(i) for i in range(r * 4 + 1, r * 4 + 5)]
            feeds = [{"node": h, "phase": k, "share": 1 / 6} for h in hosts for k in (1, 2, 3)]
            pdu: dict[str, Any] = {"id": ident, "name": ident, "rack": rack, "phases": 3, "voltage_v": 230,
                                   "rated_current_a": BREAKER_A, "feeds": feeds}  # fmt: skip
            if faults and ident == MISCABLED_PDU:
                pdu["miscabled"] = {"phase": 2, "nodes": MISCABLED_NODES}
            pdus.append(pdu)
    loop: dict[str, Any] = {
        "id": "loop1",
        "name": "loop1",
        "nodes": [host(i) for i in range(1, NODES + 1)],
        "flow_lpm": 120,
    }
    if faults:
        loop["low_flow"] = 0.3
    return {"username": USER, "password": SECRET, "pdus": pdus, "cdus": [loop]}


def facility_model(cluster: Any, service: FacilityService, *, ups_kw: float) -> None:
    """Kiln's facility model of the same site, entered through the services the pages use."""
    from portal.facility.models import CoolingLoop, Pdu, Rack, Ups
    from portal.facility.services import (
        CredentialChange,
        FeedSpec,
        loop_save,
        node_feeds_set,
        pdu_save,
        rack_save,
        ups_save,
    )

    racks = []
    for position, name in enumerate(RACKS):
        racks.append(rack_save(rack=Rack(cluster=cluster, name=name, power_budget_kw=40, cooling_budget_kw=40,
                                         room="hall1", row="A", position=position)))  # fmt: skip
    credential = CredentialChange(username=USER, password=SECRET)
    for rack in racks:
        for feed in ("A", "B"):
            ident = f"{rack.name}-{feed.lower()}"
            pdu = Pdu(rack=rack, name=ident, feed=feed, phases=3, voltage_v=230, breaker_a=[BREAKER_A] * 3,
                      endpoint_url=service.url("pdu", ident))  # fmt: skip
            pdu_save(pdu=pdu, credential=credential)
    for node in cluster.nodes.all():
        pdus = [f"{node.rack}-a", f"{node.rack}-b"]
        node_feeds_set(node=node, feeds=[FeedSpec(pdu=p, phase=k, share=1 / 6) for p in pdus for k in (1, 2, 3)])
    ups_save(ups=Ups(cluster=cluster, name="ups1", capacity_kw=ups_kw), racks=racks)
    loop = CoolingLoop(cluster=cluster, name="loop1", fluid="water", endpoint_url=service.url("loop", "loop1"))
    loop_save(loop=loop, racks=racks, credential=credential)


@pytest.fixture
def soak_site(testbed_factory, transactional_db):
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
    from portal.inventory.services import cluster_create, nodes_add

    tb = testbed_factory(NODES + 1, name="ps")  # gpu13: the facility controller's namespace
    cluster = cluster_create(
        name="soak12",
        ssh_user=tb.ssh_user,
        ssh_key_path=str(tb.client_key_path),
        known_hosts_path=str(tb.known_hosts_path),
        profile="H100-SXM-8",
    )
    for i in range(1, NODES + 1):
        nodes_add(cluster=cluster, hostnames=host(i), addresses=tb.node(host(i)).address, fields={"rack": rack_of(i)})
    plan = TestPlan.objects.create(slug="soak", name="Heat soak")
    TestPlanItem.objects.create(
        plan=plan,
        check_definition=CheckDefinition.objects.get(slug="power-soak"),
        param_overrides=SOAK_PARAMS,
        threshold_overrides=SOAK_THRESHOLDS,
    )
    service = start_facility(tb, sim_config(faults=False), host=host(NODES + 1))
    yield tb, cluster, service
    service.stop()
    tb.down()


def run_soak() -> dict[str, Any]:
    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command(
            "kiln_run", "soak12", "soak", "--wait", "--json", "--timeout", "400", stdout=out, stderr=io.StringIO()
        )
    data = json.loads(out.getvalue())
    [soak] = [r for r in data["results"] if r["check"] == "power-soak"]
    return {**soak, "run": data["run"]}


def failed_subjects(run_id: int) -> dict[str, str]:
    """The subjects measured out of spec: measurement name and labels of every ok=False value."""
    result = CheckResult.objects.get(run_id=run_id, item_key="power-soak")
    bad = Measurement.objects.filter(result=result, ok=False)
    return {f"{m.name} {json.dumps(m.labels, sort_keys=True)}": m.threshold for m in bad}


# Two 40 s soaks (healthy, then faulty) and the fleet set-up: about 2 min idle.
@pytest.mark.timeout(600)
def test_it_passes_a_healthy_site_then_fails_exactly_the_four_planted_faults(
    soak_site, celery_worker_process, client, admin_user
) -> None:
    tb, cluster, service = soak_site
    facility_model(cluster, service, ups_kw=UPS_HEALTHY_KW)

    healthy = run_soak()
    assert healthy["status"] == "pass", healthy["reason"]
    assert set(healthy["nodes"]) == {host(i) for i in range(1, NODES + 1)}
    assert all(v["status"] == "pass" for v in healthy["nodes"].values()), healthy["nodes"]
    measured = Measurement.objects.filter(result__run_id=healthy["run"], name="phase_peak_current_a")
    assert measured.count() == 18 and all(m.ok for m in measured)  # 6 PDUs x 3 phases, read by Redfish

    from portal.facility.models import Ups

    Ups.objects.filter(cluster=cluster).update(capacity_kw=UPS_SMALL_KW)
    tb.set_faults(OVER_DRAWING, power_over_pct=30)
    service.update(sim_config(faults=True))
    faulty = run_soak()
    assert faulty["status"] == "fail", faulty["reason"]
    assert {h for h, v in faulty["nodes"].items() if v["status"] != "pass"} == {OVER_DRAWING}, faulty["nodes"]
    reason = faulty["reason"]
    for named in (f"node {OVER_DRAWING}", f"PDU {MISCABLED_PDU} phase 2", "loop loop1", "UPS ups1"):
        assert named in reason, (named, reason)
    bad = failed_subjects(faulty["run"])
    subjects = {json.loads(key.split(" ", 1)[1]).get(k) for key in bad for k in ("node", "pdu", "ups")}
    subjects |= {json.loads(key.split(" ", 1)[1]).get("loop") for key in bad if key.startswith("loop_")}
    assert subjects - {None} == {OVER_DRAWING, MISCABLED_PDU, "loop1", "ups1"}, bad

    # The endpoints' password: in no page, stored output, reason or worker log line.
    client.force_login(admin_user)
    result = CheckResult.objects.get(run_id=faulty["run"], item_key="power-soak")
    for url in (f"/runs/{faulty['run']}/", f"/results/{result.pk}/", f"/clusters/{cluster.name}/"):
        response = client.get(url, follow=True)
        assert response.status_code == 200 and SECRET not in response.content.decode(), url
    raw = b"".join(bytes(x or b"") for x in (result.stdout_raw, result.stderr_raw))
    assert SECRET.encode() not in raw and SECRET not in result.stdout + result.stderr + result.reason
    assert SECRET not in Path(celery_worker_process.log_path).read_text(errors="replace")
