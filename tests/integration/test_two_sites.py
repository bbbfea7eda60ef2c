"""Workers at each site: two real Celery workers, one per queue (`-Q site-a -n site-a@%h`, the same
for site-b), a plain worker with no -Q (the portal's own: the default queue), and three clusters on
the sshd testbed, one per site queue plus one on a queue nobody serves. Each site's cluster runs
the quick plan, and every SSH session to its nodes comes from its own worker: the results name the
worker that ran them, and the connections to the nodes, sampled with `ss` while the runs go,
belong to that worker's process, as do the sessions the nodes' sshd logs accept. The third
cluster's checks stay queued: nothing else runs them, no sshd of its nodes accepts a session (not
even the default worker takes it), and the reaper says that no worker is serving its queue."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from portal.catalog.services import fast_plan_ensure
from portal.execution import reaper
from portal.inventory.models import Cluster
from portal.inventory.services import cluster_create, nodes_add
from portal.runs import leases, queues, services
from portal.runs.models import ACTIVE_STATUSES, CheckResult, Run, RunEvent
from tests.conftest import WorkerProcess, _flush_broker

pytestmark = pytest.mark.integration

SITES = {"site-a": ("gpu01", "gpu02", "gpu03"), "site-b": ("gpu04", "gpu05", "gpu06"), "site-c": ("gpu07", "gpu08")}
SERVED = ("site-a", "site-b")  # site-c has no worker
# The quick plan at simulator speed takes ~30 s on three nodes of the testbed; generous for a
# loaded 2-core CI machine, well inside the test's 2-minute budget.
RUN_TIMEOUT_S = 100
# How often the connections to the nodes are sampled: a node's task holds its one connection for
# the whole plan (seconds), so a few samples see each.
SAMPLE_S = 0.2
ACCEPTED = re.compile(r"Accepted publickey for \S+ from (\S+) port (\d+)")


@pytest.fixture
def site_workers(real_services, transactional_db, tmp_path: Path) -> Iterator[dict[str, WorkerProcess]]:
    _flush_broker()
    workers = {q: WorkerProcess(tmp_path / f"{q}.log", queues=[q], name=f"{q}@%h") for q in SERVED}
    workers["default"] = WorkerProcess(tmp_path / "default.log")  # `celery -A worker worker`, as the docs have it
    try:
        for worker in workers.values():
            worker.start()
        yield workers
    finally:
        for worker in workers.values():
            worker.stop()
        _flush_broker()


class Connections:
    """The established TCP connections to the nodes' sshd, sampled with `ss -tnp` in a thread:
    {(client port, node address): the client's pids}."""

    def __init__(self, addresses: set[str]) -> None:
        self.addresses = addresses
        self.seen: dict[tuple[int, str], set[int]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True).stdout
            for line in out.splitlines():
                fields = line.split()
                if len(fields) < 5:
                    continue
                local, peer = fields[2], fields[3]
                address = peer.rpartition(":")[0]
                if address in self.addresses:
                    pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
                    self.seen.setdefault((int(local.rpartition(":")[2]), address), set()).update(pids)
            self.stop.wait(SAMPLE_S)

    def __enter__(self) -> Connections:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)


def accepted_since(log: Path, offset: int) -> list[int]:
    """The client ports of the sessions a node's sshd accepted after `offset` bytes of its log."""
    text = log.read_bytes()[offset:].decode(errors="replace")
    return [int(port) for _, port in ACCEPTED.findall(text)]


def test_each_sites_worker_alone_reaches_its_clusters_nodes(clean_testbed, site_workers) -> None:
    tb = clean_testbed
    nodes = {n.hostname: n for n in tb.nodes}
    plan = fast_plan_ensure(slug="quick-fast", name="Quick sweep (simulator speed)", source="quick")
    clusters: dict[str, Cluster] = {}
    for queue, hosts in SITES.items():
        clusters[queue] = cluster_create(
            name=f"dc-{queue}",
            ssh_user=tb.ssh_user,
            ssh_key_path=str(tb.client_key_path),
            known_hosts_path=str(tb.known_hosts_path),
            profile="H100-SXM-8",
            queue=queue,
        )
        for host in hosts:
            nodes_add(cluster=clusters[queue], hostnames=host, addresses=nodes[host].address)
    address_site = {nodes[h].address: q for q, hosts in SITES.items() for h in hosts}
    log_offsets = {h: n.log_path.stat().st_size if n.log_path.exists() else 0 for h, n in nodes.items()}

    started = time.monotonic()
    with Connections(set(address_site)) as conns:
        runs = {q: services.run_start(cluster=clusters[q], plan=plan) for q in SITES}
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            if not Run.objects.filter(pk__in=[runs[q].pk for q in SERVED], status__in=ACTIVE_STATUSES).exists():
                break
            time.sleep(1)
    took = time.monotonic() - started
    print(f"two sites: both runs closed in {took:.0f} s")

    pids = {q: w.process.pid for q, w in site_workers.items() if w.process}
    for queue in SERVED:
        run = Run.objects.get(pk=runs[queue].pk)
        assert run.status not in ACTIVE_STATUSES, f"{queue}: run still {run.status} after {RUN_TIMEOUT_S} s"
        assert run.plan_snapshot["queue"] == queue
        results = list(CheckResult.objects.filter(run=run))
        assert results and all(r.status not in ACTIVE_STATUSES for r in results)
        # Every check of this cluster was run by this site's worker (its Celery node name).
        workers = {r.worker_name.rpartition(" pid ")[0] for r in results}
        assert len(workers) == 1 and next(iter(workers)).startswith(f"{queue}@"), (queue, workers)
        assert {r.worker_name.rpartition(" pid ")[2] for r in results} == {str(pids[queue])}
        errors = [(r.node_id, r.item_key, r.reason) for r in results if r.status == "error"]
        assert not errors, f"{queue}: {errors}"

    # The connection source: each connection to a node seen while the runs went was opened by the
    # worker of the node's site, and every session the site's sshds accepted was one of those.
    assert conns.seen, "no connection to a node was seen"
    for (port, address), owners in conns.seen.items():
        assert owners == {pids[address_site[address]]}, (port, address, owners, pids)
    owner_by_port = {port: next(iter(owners)) for (port, _), owners in conns.seen.items()}
    for queue in SERVED:
        for host in SITES[queue]:
            ports = accepted_since(nodes[host].log_path, log_offsets[host])
            assert ports, f"{host}'s sshd accepted no session"
            seen = [owner_by_port[p] for p in ports if p in owner_by_port]
            assert seen and set(seen) == {pids[queue]}, (host, ports, seen)

    # The cluster whose queue no worker serves: nothing ran it, no sshd of its nodes let anyone in.
    waiting = CheckResult.objects.filter(run=runs["site-c"])
    assert waiting.exists() and set(waiting.values_list("status", flat=True)) == {"queued"}
    assert set(waiting.values_list("worker_name", flat=True)) == {""}
    for host in SITES["site-c"]:
        assert accepted_since(nodes[host].log_path, log_offsets[host]) == [], host
    assert not any(address_site[a] == "site-c" for _, a in conns.seen)

    # The plain worker consumes the default queue, and only that; the sites' workers only theirs.
    assert queues.served_queues(timeout=3) == {"default", *SERVED}

    # Once its checks are overdue, the reaper finds their messages waiting in site-c's queue (not
    # lost: nothing is sent again) and, asking the live workers, says no worker is serving it.
    later = timezone.now() + timedelta(seconds=leases.lost_message_s() + 5)
    reaper.requeue_lost(now=later)
    events = list(RunEvent.objects.filter(run=runs["site-c"]).values_list("kind", "message"))
    assert [kind for kind, _ in events] == ["no worker"], events
    assert events[0][1].startswith("no worker is serving queue site-c: ")
    for queue in SERVED:
        assert not RunEvent.objects.filter(run=runs[queue], kind="no worker").exists()
    assert set(waiting.values_list("status", flat=True)) == {"queued"}
