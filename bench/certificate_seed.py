"""The data bench/bench_certificate.py issues certificates over: a cluster of N nodes with serials,
racks and positions, one finished all-pass run of the 8-check plan (about 90 measurements per node,
a raw output per result, burn-in and NCCL series) and an acceptance campaign over it."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from bench.bench_pages import CHECKS

GPUS = 8
BURN_IN_SERIES = (("temp_gpu", "C", 68.0, 4.0), ("power_w", "W", 640.0, 25.0), ("sm_clock_mhz", "MHz", 1980.0, 15.0))
NCCL_SIZES = [float(2**k) for k in range(10, 35)]  # 1 KiB .. 16 GiB: 25 points
IB_PORTS = 8


def _pool(rng: random.Random, mean: float, sd: float, points: int, digits: int) -> list[float]:
    return [round(rng.gauss(mean, sd), digits) for _ in range(points)]


def _measurements(result: Any, node: Any, rng: random.Random) -> list[Any]:
    """About 90 measurements per node, shaped like what the checks record."""
    from portal.runs.models import Measurement

    def m(name: str, **kw: Any) -> Any:
        return Measurement(result=result, name=name, **kw)

    host = node.hostname
    kind = result.kind
    out: list[Any] = []
    if kind == "gpu_inventory":
        out.append(m("gpu_count", value=8.0, threshold="== 8", ok=True))
        out.append(m("gpu_models", text="NVIDIA H100 80GB HBM3"))
        for gpu in range(GPUS):
            seed = f"{abs(hash((host, gpu))):016x}"
            uuid = f"GPU-{seed[:8]}-{seed[8:12]}-{seed[12:16]}-{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}"
            out.append(m("gpu_uuid", text=uuid, gpu=gpu))
            out.append(m("gpu_serial", text=f"165{rng.randrange(10**9, 10**10)}", gpu=gpu))
            out.append(m("vbios", text="96.00.99.00.01", gpu=gpu))
    elif kind == "sw_consistency":
        for name, text in (
            ("driver_version", "550.90.07"),
            ("cuda_version", "12.4"),
            ("kernel", "5.15.0-113-generic"),
            ("os", "Ubuntu 22.04.4 LTS"),
            ("nccl_version", "2.21.5"),
        ):
            out.append(m(name, text=text, ok=True))
    elif kind in ("gpu_links", "nvlink"):
        for gpu in range(GPUS):
            out.append(m("nvlinks_active", value=18.0, gpu=gpu, threshold=">= 18", ok=True))
    elif kind in ("ib_ports", "infiniband"):
        for port in range(IB_PORTS):
            out.append(
                m("port_rate", value=400.0, unit="Gb/s", threshold=">= 400", ok=True, labels={"port": f"mlx5_{port}"})
            )
    elif kind == "nccl_allreduce":
        out.append(m("busbw_avg_reported", value=round(rng.gauss(360, 3), 2), unit="GB/s"))
        out.append(m("busbw_peak", value=round(rng.gauss(475, 4), 2), unit="GB/s", threshold=">= 400", ok=True))
        out.append(m("size_at_peak", value=float(2**33), unit="B"))
    elif kind == "burn_in":
        for gpu in range(GPUS):
            out.append(
                m(
                    "gflops",
                    value=round(rng.gauss(110_000, 800), 1),
                    unit="Gflop/s",
                    gpu=gpu,
                    threshold=">= 100000",
                    ok=True,
                    labels={"phase": "load"},
                )
            )
            out.append(m("temp_max", value=float(rng.randrange(70, 80)), unit="C", gpu=gpu, threshold="<= 87", ok=True))
            out.append(m("power_w_steady_mean", value=round(rng.gauss(640, 20), 1), unit="W", gpu=gpu))
            out.append(m("sm_clock_mhz_steady_min", value=float(rng.randrange(1950, 1981)), unit="MHz", gpu=gpu))
    elif kind == "dlc_temperature":
        for gpu in range(GPUS):
            out.append(
                m("temp_gpu_steady", value=round(rng.gauss(70, 1.5), 1), unit="C", gpu=gpu, threshold="<= 85", ok=True)
            )
    elif kind in ("ecc_health", "ecc"):
        for gpu in range(GPUS):
            out.append(m("volatile_uncorrected", value=0.0, gpu=gpu, threshold="<= 0", ok=True))
    else:  # a kind this bench does not know: a handful of generic figures
        for i in range(4):
            out.append(m(f"m{i}", value=round(rng.random(), 4), ok=True))
    return out


def _results(
    run: Any, nodes: list[Any], items: list[dict[str, Any]], *, rng: random.Random, stdout_bytes: int
) -> list[Any]:
    """One passing result per node and plan item, with a raw output of `stdout_bytes`."""
    from portal.runs.models import CheckResult

    filler = ("x" * 79 + "\n") * (stdout_bytes // 80 + 1)
    started = run.started_at
    results = []
    for node in nodes:
        for item in items:
            t0 = started + timedelta(seconds=60 * item["position"])
            duration = 2.0 + 30 * (item["kind"] == "burn_in") + rng.random()
            results.append(
                CheckResult(
                    run=run,
                    node=node,
                    item_key=item["key"],
                    kind=item["kind"],
                    scope="node",
                    position=item["position"],
                    status="pass",
                    reason="all within spec",
                    command=f"python3 probe.py {item['kind']} --json",
                    exit_code=0,
                    stdout=f"{node.hostname} {item['key']}\n" + filler[:stdout_bytes],
                    stderr="",
                    started_at=t0,
                    duration_s=duration,
                    finished_at=t0 + timedelta(seconds=duration),
                )
            )
    return results


def _series(
    result: Any, *, rng: random.Random, pools: dict[str, list[float]], xs: list[float], series_points: int
) -> list[Any]:
    """The result's series: 8 GPUs x 3 burn-in metrics (windows of shared pools), or one busbw curve,
    packed and digested as runs.services stores them."""
    from checks.core.base import Series as CheckSeries
    from portal.runs.models import Series
    from portal.runs.services import series_rows

    curves = []
    if result.kind == "burn_in":
        for gpu in range(GPUS):
            for metric, unit, _, _ in BURN_IN_SERIES:
                shift = rng.randrange(series_points)
                ys = pools[metric][shift : shift + series_points]
                curves.append(CheckSeries(name=metric, unit=unit, x=xs, y=list(ys), gpu=gpu))
    elif result.kind == "nccl_allreduce":
        busbw: list[float | None] = [round(min(480.0, 0.5 * s**0.31) + rng.gauss(0, 0.5), 2) for s in NCCL_SIZES]
        curves.append(CheckSeries(name="busbw", unit="GB/s", x=list(NCCL_SIZES), y=busbw, x_unit="B"))
    return [Series(result=result, **row) for row in series_rows(curves)]


def seed_campaign(
    name: str, size: int, *, rng: random.Random, series_points: int, stdout_bytes: int, user: Any
) -> dict[str, Any]:
    """A cluster of `size` nodes, one finished all-pass run of the 8-check plan, a campaign over it."""
    from django.utils import timezone

    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
    from portal.certificates import services as cert_services
    from portal.inventory.models import Cluster, Node
    from portal.runs import services
    from portal.runs.models import CheckResult, Measurement, Run, Series

    plan, created = TestPlan.objects.get_or_create(slug="bench8", defaults={"name": "Bench (8 checks)"})
    if created:
        for order, slug in enumerate(CHECKS):
            TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    cluster = Cluster.objects.create(
        name=name, profile="H100-SXM-8", transport="local", customer="Bench Customer", site="Bench Site"
    )
    Node.objects.bulk_create(
        Node(
            cluster=cluster,
            hostname=f"{name}-gpu{i:04d}",
            rack=f"R{i // 32:02d}",
            position=str(i % 32),
            group=f"SU{i // 128:02d}",
            serial=f"SN{rng.randrange(10**11, 10**12)}",
        )
        for i in range(1, size + 1)
    )
    nodes = list(cluster.nodes.order_by("hostname"))
    snapshot = services.plan_snapshot_build(plan=plan, cluster=cluster)
    items = snapshot["items"]
    now = timezone.now()
    started = now - timedelta(hours=14)
    run = Run.objects.create(
        cluster=cluster,
        plan=plan,
        plan_snapshot=snapshot,
        node_set=f"{name}-gpu[0001-{size:04d}]",
        status="pass",
        started_at=started,
        finished_at=started + timedelta(hours=13),
        requested_by=user,
    )
    pools = {
        metric: _pool(rng, mean, sd, series_points * 2, 1 if metric != "sm_clock_mhz" else 0)
        for metric, _, mean, sd in BURN_IN_SERIES
    }
    xs = [float(2 * i) for i in range(series_points)]
    counts = {"results": 0, "measurements": 0, "series": 0, "points": 0}
    chunk = 50  # nodes per bulk write: keeps the seeding's own memory peak low
    for start in range(0, len(nodes), chunk):
        results = _results(run, nodes[start : start + chunk], items, rng=rng, stdout_bytes=stdout_bytes)
        CheckResult.objects.bulk_create(results, batch_size=2000)
        if not results[0].pk:  # backends that return no ids from bulk_create
            keys = {(r.node_id, r.item_key): r for r in results}
            for row in CheckResult.objects.filter(run=run, node_id__in={r.node_id for r in results}):
                keys[(row.node_id, row.item_key)].pk = row.pk
        measurements, series = [], []
        for result in results:
            measurements.extend(_measurements(result, result.node, rng))
            series.extend(_series(result, rng=rng, pools=pools, xs=xs, series_points=series_points))
        Measurement.objects.bulk_create(measurements, batch_size=2000)
        Series.objects.bulk_create(series, batch_size=200)
        counts["results"] += len(results)
        counts["measurements"] += len(measurements)
        counts["series"] += len(series)
        counts["points"] += sum(len(s.y) for s in series)
    campaign = cert_services.campaign_create(cluster=cluster, plan=plan, name=f"{name} acceptance", user=user)
    cert_services.campaign_run_add(campaign=campaign, run=run, user=user)
    return {"cluster": cluster, "campaign": campaign, "size": size, "counts": counts, "items": items}
