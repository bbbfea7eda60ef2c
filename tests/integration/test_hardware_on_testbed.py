"""`kiln verify FILE --against CLUSTER` on a 3-node sshd testbed: a cluster accepted with the GPU
inventory and the InfiniBand ports checks (over real SSH, host keys checked), its certificate issued;
then one GPU of one node is swapped in the simulator and the verification names the node, the GPU
index and both serials; an unreachable node is "could not tell", not a difference."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.certificates import hardware, keys, services
from portal.execution.groups import execute_run_inline
from testbed.sim import node_env

pytestmark = pytest.mark.integration


@pytest.fixture
def accepted(testbed_factory, transactional_db, settings, tmp_path: Path, make_user, monkeypatch):
    """A certificate of cluster `hw` (3 nodes), as a PDF file, and the testbed."""
    from portal.inventory.services import cluster_create, nodes_add

    settings.KILN_KEY_DIR = str(tmp_path / "keys")
    settings.KILN_CERT_CHARTS = "0"
    keys.keyring_init(site="Test site")
    monkeypatch.setattr("portal.certificates.services.issuing._enqueue_issue", lambda campaign_id: None)
    tb = testbed_factory(3, name="hw")
    for node in tb.nodes:
        tb.clear_faults(node.hostname)
    cluster = cluster_create(
        name="hw",
        ssh_user=tb.ssh_user,
        ssh_key_path=str(tb.client_key_path),
        known_hosts_path=str(tb.known_hosts_path),
        profile="H100-SXM-8",
    )
    for node in tb.nodes:
        nodes_add(cluster=cluster, hostnames=node.hostname, addresses=node.address)
    plan = TestPlan.objects.create(slug="identities", name="Hardware identities")
    for order, slug in enumerate(["gpu-inventory", "ib-ports"]):
        TestPlanItem.objects.create(
            plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order, param_overrides={}
        )
    operator = make_user("olga", "operator")
    vendor, customer = make_user("vera", "approver", "vendor"), make_user("carl", "approver", "customer")
    campaign = services.campaign_create(cluster=cluster, plan=plan, name="handover", user=operator)
    run = services.campaign_run_start(campaign=campaign, node_set="", user=operator, enqueue=False)
    execute_run_inline(run_id=run.pk, node_ids=list(run.results.values_list("node_id", flat=True).distinct()))
    run.refresh_from_db()
    assert run.status == "pass", list(run.results.values_list("item_key", "status", "reason"))
    services.certificate_sign(campaign=campaign, user=vendor)
    services.certificate_sign(campaign=campaign, user=customer)
    certificate = services.certificate_issue(campaign_id=campaign.pk)
    assert certificate is not None
    path = tmp_path / f"{certificate.number}.pdf"
    path.write_bytes(bytes(certificate.pdf))
    yield path, tb
    for node in tb.nodes:
        tb.start_sshd(node.hostname)
        tb.clear_faults(node.hostname)


def verify(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_info:
        call_command("kiln_verify", *args, stdout=out, stderr=io.StringIO())
    return int(exit_info.value.code or 0), out.getvalue()


def test_it_names_the_node_the_gpu_and_both_serials_of_a_swapped_gpu(accepted) -> None:
    path, tb = accepted
    node = tb.nodes[1].hostname

    code, text = verify(str(path), "--against", "hw")
    assert code == 0, text
    assert "hardware: MATCHES" in text

    code, text = verify(str(path), "--against", "hw", "--json")
    before = json.loads(text)["hardware"]
    assert code == 0 and before["differences"] == [] and before["could_not_tell"] == []
    assert before["nodes_compared"] == 3
    # 3 nodes x (chassis + 8 GPUs + 6 PSUs + 9 NICs) sealed and read again.
    assert before["parts_compared"] == 3 * (1 + 8 + 6 + 9)

    gpu = next(g for g in _gpus_now(tb, node) if g[0] == 3)
    tb.set_faults(node, swap_gpu=3)
    swapped = next(g for g in _gpus_now(tb, node) if g[0] == 3)
    assert swapped[1] != gpu[1]

    code, text = verify(str(path), "--against", "hw")
    assert code == hardware.DIFFERS_EXIT, text
    line = next(line for line in text.splitlines() if "swapped" in line)
    assert f"{node}: GPU 3 swapped" in line
    assert f"serial {gpu[1]} (sealed) -> {swapped[1]} (now)" in line
    assert gpu[2] in line and swapped[2] in line  # the UUIDs too
    assert text.count("swapped") == 1  # the other GPUs and nodes are the ones sealed

    # A power supply swapped on another node is named too, beside the GPU.
    other = tb.nodes[2].hostname
    tb.set_faults(other, swap_psu=4)
    code, text = verify(str(path), "--against", "hw", "--json")
    changes = {(d["node"], d["part"], d["key"], d["change"]) for d in json.loads(text)["hardware"]["differences"]}
    assert code == hardware.DIFFERS_EXIT
    assert changes == {(node, "GPU", "3", "swapped"), (other, "PSU", "PSU4", "swapped")}


def test_an_unreachable_node_is_could_not_tell_not_a_difference(accepted) -> None:
    path, tb = accepted
    node = tb.nodes[0].hostname
    tb.stop_sshd(node)

    code, text = verify(str(path), "--against", "hw", "--json")

    assert code == hardware.COULD_NOT_TELL_EXIT, text
    found = json.loads(text)["hardware"]
    assert found["differences"] == []
    assert found["nodes_compared"] == 2
    assert any(line.startswith(f"{node}: could not tell: unreachable") for line in found["could_not_tell"]), found


def _gpus_now(tb, hostname: str) -> list[tuple[int, str, str]]:
    """(index, serial, uuid) of the node's GPUs as its simulated nvidia-smi reports them."""
    node = tb.node(hostname)
    env = {**os.environ, **node_env(tb.sim_paths, node.state_file)}
    argv = ["nvidia-smi", "--query-gpu=index,serial,uuid", "--format=csv,noheader"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    rows = [line.split(", ") for line in out.splitlines() if line.strip()]
    return [(int(i), serial, uuid) for i, serial, uuid in rows]
