"""Faults in what a node prints: NUL bytes (the testbed's `garbage=1`), and a 200 MB flood of binary
junk (`flood_mb=200`), through a real Celery worker over real SSH, and through the local transport.

Each ends with the result recorded with its own verdict (never `internal error`), the raw bytes
retrievable exactly from the result page's download, the node's other checks judged as usual, and
the worker's memory bounded while it reads and stores the flood."""

from __future__ import annotations

import hashlib
import sys
import time
import tracemalloc

import pytest
from django.test import Client
from django.urls import reverse

from checks.core.base import Command, Verdict
from portal.runs import rawoutput, services
from portal.runs.models import CheckResult, Run
from tests.faults.helpers import peak_rss, plan_of, process_tree, wait_for
from tests.portal.conftest import cluster, make_run, quick_plan  # noqa: F401  (fixtures)
from worker.ssh import DEFAULT_OUTPUT_CAP, LocalTransport, NodeTarget

pytestmark = pytest.mark.integration

CHECKS = ("gpu-inventory", "gpu-links", "ecc-health")  # gpu-links reads nvidia-smi; the others NVML
MIB = 1024 * 1024
PATTERN = bytes(range(256))  # testbed/sim/nvidia-smi flood: byte i of the stream is i % 256
# A run of three quick checks on 8 simulated nodes takes ~10 s on these machines; the flood adds
# the time to carry 200 MiB over SSH (~10 s). Generous: a shared 2-core machine.
RUN_DEADLINE_S = 180
# What reading and storing one 200 MB output may add to a worker's peak memory: the transport keeps
# 16 MiB per stream, and its bytes, their text and the display windows are a few copies of that.
# The issue measured 556 MB RSS for the same flood when the output was only capped when stored.
FLOOD_MEMORY_BOUND = 160 * MIB


def download(client: Client, result: CheckResult, stream: str = "stdout") -> bytes:
    response = client.get(reverse("runs:result_raw_output", args=[result.pk, stream]))
    assert response.status_code == 200, response.status_code
    return b"".join(response.streaming_content)


def finished(run: Run) -> Run:
    wait_for(lambda: Run.objects.get(pk=run.pk).status not in ("queued", "running"), RUN_DEADLINE_S, "the run to end")
    return Run.objects.get(pk=run.pk)


def results(run: Run) -> dict[tuple[str, str], CheckResult]:
    return {(r.node.hostname, r.item_key): r for r in CheckResult.objects.filter(run=run).select_related("node")}


def assert_judged_by_the_check(result: CheckResult) -> None:
    assert result.status not in ("queued", "running"), result
    assert not result.portal_fault and "internal error" not in result.reason, result.reason


@pytest.fixture
def viewer(make_user) -> Client:
    client = Client()
    client.force_login(make_user("vera", "viewer"))
    return client


def test_it_records_nul_output_with_the_checks_own_verdicts(
    testbed_cluster, clean_testbed, celery_worker_process, viewer
) -> None:
    clean_testbed.set_faults("gpu03", garbage=1)  # NVML fails; nvidia-smi prints NUL and junk

    run = finished(services.run_start(cluster=testbed_cluster, plan=plan_of("nul", *CHECKS)))

    found = results(run)
    for check in CHECKS:
        assert_judged_by_the_check(found[("gpu03", check)])
        for host in ("gpu01", "gpu02", "gpu04", "gpu05", "gpu06", "gpu07", "gpu08"):
            assert found[(host, check)].status == "pass", (host, check, found[(host, check)].reason)
    links = found[("gpu03", "gpu-links")]
    assert links.status == "error"
    raw = download(viewer, links)
    section = raw.split(b"### nvidia-smi nvlink --status\n", 1)[1]
    assert section.startswith(b'<?xml version="1.0" ?>\n<nvidia_smi_log>\n\t<driver_version>5\x00\x07')
    assert hashlib.sha256(raw).hexdigest() == links.stdout_sha256
    assert "<driver_version>5\\x00\x07" in links.stdout and "\x00" not in links.stdout  # BEL is UTF-8: kept
    assert run.status == "error"


def flood_as_read(total: int, cap: int) -> bytes:
    """What the transport keeps of `total` bytes of the flood pattern under `cap` (CappedStream)."""
    head, tail = cap - cap // 4, cap // 4
    assert head % 256 == 0 and tail % 256 == 0 and total % 256 == 0
    marker = f"\n[... {total - cap} bytes cut by Kiln: output over the {cap}-byte read cap; head and tail kept ...]\n"
    return PATTERN * (head // 256) + marker.encode() + PATTERN * (tail // 256)


@pytest.mark.timeout(600)
def test_it_records_a_200_mb_flood_over_ssh_with_bounded_worker_memory(
    testbed_cluster, clean_testbed, real_services, viewer, tmp_path
) -> None:
    from tests.conftest import WorkerProcess, _flush_broker

    plan = plan_of("flood", *CHECKS)
    _flush_broker()
    worker = WorkerProcess(tmp_path / "worker.log", concurrency=1)  # one pool process: its peak is the flood's
    worker.start()
    try:
        warm = finished(services.run_start(cluster=testbed_cluster, plan=plan, nodes=[testbed_cluster.nodes.first()]))
        assert warm.status == "pass", warm.reason
        before = max(peak_rss(pid) for pid in process_tree(worker.process.pid))
        clean_testbed.set_faults("gpu05", flood_mb=200)

        started = time.monotonic()
        run = finished(services.run_start(cluster=testbed_cluster, plan=plan))
        elapsed = time.monotonic() - started
        after = max(peak_rss(pid) for pid in process_tree(worker.process.pid))
    finally:
        worker.stop()
        _flush_broker()

    found = results(run)
    links = found[("gpu05", "gpu-links")]
    assert_judged_by_the_check(links)
    assert links.status == "error" and links.output_truncated
    for check in ("gpu-inventory", "ecc-health"):
        assert found[("gpu05", check)].status == "pass", found[("gpu05", check)].reason
    assert {r.status for (host, _), r in found.items() if host != "gpu05"} == {"pass"}

    raw = download(viewer, links)
    expected = flood_as_read(200 * MIB, DEFAULT_OUTPUT_CAP)
    assert raw.endswith(b"### nvidia-smi nvlink --status\n" + expected + b"\n")
    assert hashlib.sha256(raw).hexdigest() == links.stdout_sha256
    assert len(links.stdout) < 2 * 262_144  # the display copy stays capped (KILN_OUTPUT_CAP)
    grew = after - before
    print(
        f"\nflood: 200 MiB over SSH, run of 8 nodes in {elapsed:.1f} s; worker pool peak RSS "
        f"{before / MIB:.0f} MiB before, {after / MIB:.0f} MiB after (+{grew / MIB:.0f} MiB)",
        file=sys.stderr,
    )
    assert grew < FLOOD_MEMORY_BOUND, f"the flood added {grew / MIB:.0f} MiB to the worker's peak"


def test_it_records_a_200_mb_flood_through_the_local_transport_with_bounded_memory(
    cluster,  # noqa: F811
    make_run,  # noqa: F811
    db,
) -> None:
    """The other real transport, in this process: read, judged, recorded, under tracemalloc."""
    flood = (
        "import sys\nblock = bytes(range(256)) * 256\nfor _ in range(200 * 16):\n    sys.stdout.buffer.write(block)\n"
    )
    transport = LocalTransport(NodeTarget(hostname="n01", transport="local"))
    run = make_run(cluster)
    result = services.results_claim(run_id=run.pk, node_id=cluster.nodes.get(hostname="n01").pk, claim="t")[0]
    tracemalloc.start()
    try:
        output = transport.run(Command(argv=(sys.executable, "-c", flood), timeout=120))
        recorded = services.record_from_check(
            result=result, claim="t", verdict=Verdict("error", "not nvlink output"), measurements=[], outputs=[output]
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert recorded and output.truncated and output.exit_code == 0
    stored = CheckResult.objects.only("stdout_raw", "stdout_sha256").get(pk=result.pk)
    raw = rawoutput.raw_bytes(stored.stdout_raw)
    assert raw == flood_as_read(200 * MIB, DEFAULT_OUTPUT_CAP)
    assert stored.stdout_sha256 == hashlib.sha256(raw).hexdigest()
    print(f"\nflood: 200 MiB through the local transport, peak traced {peak / MIB:.0f} MiB", file=sys.stderr)
    assert peak < FLOOD_MEMORY_BOUND, f"{peak / MIB:.0f} MiB traced for a 200 MiB output"
