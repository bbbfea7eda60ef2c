"""Localisation by halves on a 32-node sshd testbed: one slow node among 32 is named in at most 6
rounds, by a real Celery worker over real SSH, with the simulated mpirun and
all_reduce_perf run from the launcher.

The rounds are counted from what the launcher ran: every recorded mpirun command carries its
sub-run's hostfile tag (`...-r<round>-<index>`), and every recorded all_reduce_perf output names the
hosts its ranks ran on. The measurement labels must tell the same story.
"""

from __future__ import annotations

import io
import json
import re
from collections import defaultdict

import pytest
from ClusterShell.NodeSet import NodeSet
from django.conf import settings
from django.core.management import call_command

from checks.core.base import simulator_params
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.runs import rawoutput
from portal.runs.models import CheckResult, Measurement

pytestmark = pytest.mark.integration

SIZE = 32
SLOW = "gpu23"
RACK_SIZE = 8
# The bar: the group run and the rounds of sub-runs that name the node, at most 6.
MOST_ROUNDS = 6

SECTION = re.compile(r"^### (.*)$", re.M)
TAG = re.compile(r"--hostfile /tmp/kiln-nccl-(\S+)\.hostfile")
SUB_RUN = re.compile(r"-r(\d+)-(\d+)$")
RANK_HOST = re.compile(r"^#\s+Rank\s+\d+ Group\s+\d+ Pid\s+\d+ on (\S+) device", re.M)


@pytest.fixture
def slow_cluster(testbed_factory, transactional_db):
    from portal.inventory.services import cluster_create, nodes_add

    tb = testbed_factory(SIZE, name="lz")
    cluster = cluster_create(
        name="loc32",
        ssh_user=tb.ssh_user,
        ssh_key_path=str(tb.client_key_path),
        known_hosts_path=str(tb.known_hosts_path),
        profile="H100-SXM-8",
    )
    for i, node in enumerate(tb.nodes):
        rack = f"rack{i // RACK_SIZE + 1}"
        nodes_add(cluster=cluster, hostnames=node.hostname, addresses=node.address, fields={"rack": rack})
    plan = TestPlan.objects.create(slug="multi", name="NCCL across nodes")
    TestPlanItem.objects.create(
        plan=plan,
        check_definition=CheckDefinition.objects.get(slug="nccl-allreduce-multi"),
        param_overrides=simulator_params("nccl-allreduce-multi"),
    )
    tb.set_faults(SLOW, net_slow_factor=0.3)  # a slow port: every multi-node run with it is slow
    yield tb, cluster
    tb.down()


def launched_runs(result: CheckResult) -> list[tuple[str, list[str]]]:
    """(hostfile tag, hosts its ranks ran on) of every all_reduce_perf the launcher ran, in order,
    read from the recorded raw output (one `### command` section per command)."""
    raw = (rawoutput.raw_bytes(result.stdout_raw) or b"").decode()
    headers = list(SECTION.finditer(raw))
    runs = []
    for header, after in zip(headers, [*headers[1:], None], strict=True):
        tag = TAG.search(header.group(1))
        if tag is None or "all_reduce_perf" not in header.group(1):
            continue  # the hostfile write
        body = raw[header.end() : after.start() if after else len(raw)]
        runs.append((tag.group(1), sorted(set(RANK_HOST.findall(body)))))
    return runs


def test_it_names_one_slow_node_among_32_in_at_most_6_rounds(slow_cluster, celery_worker_process) -> None:
    out = io.StringIO()
    args = ("loc32", "multi", "--wait", "--json", "--timeout", "300")
    with pytest.raises(SystemExit) as exit_info:
        call_command("kiln_run", *args, stdout=out, stderr=io.StringIO())
    data = json.loads(out.getvalue())
    assert exit_info.value.code == 1, data
    [multi] = [r for r in data["results"] if r["check"] == "nccl-allreduce-multi"]
    hosts = [f"gpu{i:02d}" for i in range(1, SIZE + 1)]

    # The verdict: the slow node named fail, every other node passes.
    assert multi["status"] == "fail", multi["reason"]
    assert set(multi["nodes"]) == set(hosts)
    assert multi["nodes"][SLOW]["status"] == "fail", multi["nodes"][SLOW]
    assert "known-good partner" in multi["nodes"][SLOW]["reason"]
    assert {h for h, v in multi["nodes"].items() if v["status"] != "pass"} == {SLOW}
    assert f"localised to {SLOW} by halves" in multi["reason"]

    # The rounds, from the commands the launcher ran and the hosts their ranks ran on.
    result = CheckResult.objects.get(run_id=data["run"], item_key="nccl-allreduce-multi")
    runs = launched_runs(result)
    root_tag = f"kiln-{data['run']}-{result.pk}"
    assert runs[0] == (root_tag, hosts), "the group run over all 32 nodes comes first"
    by_round: dict[int, list[list[str]]] = defaultdict(list)
    for tag, ran_on in runs[1:]:
        assert tag.startswith(root_tag), tag
        match = SUB_RUN.search(tag)
        assert match, tag
        by_round[int(match.group(1))].append(ran_on)
    rounds = sorted(by_round)
    assert rounds == list(range(1, len(rounds) + 1))
    assert 1 + len(rounds) <= MOST_ROUNDS, f"the group run and {len(rounds)} rounds of sub-runs: {dict(by_round)}"
    for number, sub_runs in by_round.items():
        members = [h for ran_on in sub_runs for h in ran_on]
        assert len(members) == len(set(members)), f"round {number}: a node in two sub-runs at once"
        assert len(sub_runs) <= settings.KILN_PAIR_PARALLELISM
        assert all(len(ran_on) >= 2 for ran_on in sub_runs)
    # By rack first: round 1 is racks 1-2 against racks 3-4.
    assert by_round[1] == [hosts[:16], hosts[16:]]
    # Named by a pair with a partner that passed in an earlier round.
    [(last, pair)] = [(n, r) for n, sub_runs in by_round.items() for r in sub_runs if SLOW in r and len(r) == 2]
    partner = next(h for h in pair if h != SLOW)
    assert any(partner in r for n in rounds if n < last for r in by_round[n])

    # The measurement labels tell the same story, one status per sub-run.
    statuses = Measurement.objects.filter(result=result, name="localise_status")
    labelled = sorted((int(m.labels["round"]), sorted(NodeSet(m.labels["nodes"]))) for m in statuses)
    assert labelled == sorted((n, r) for n, sub_runs in by_round.items() for r in sub_runs)
    slow_pairs = [m for m in statuses if SLOW in m.labels.get("pair", "").split(",")]
    assert [m.text for m in slow_pairs] == ["fail"]
