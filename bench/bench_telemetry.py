"""Compact telemetry: a 12 h burn-in sampled at 1 Hz on 8 GPUs, in the probe's columnar output
(sampling schema 2) against the one-object-per-sample output of older probes (schema 1).

    python bench/bench_telemetry.py [--hours 12] [--gpus 8] [--interval 1] [--keep DIR]

Both outputs carry the same telemetry (seeded, shaped like NVML's: whole degrees drifting by a
degree, power in milliwatts with noise, SM clocks stepping down under the power cap, a rare
unreadable reading), the same before/after probe documents and the same gpu_burn stdout (the real
8×A100 capture in tests/fixtures/gpu-burn), so the burn_in check passes on both and must give the
same measurements and series. The schema 2 document is assembled by the probe's own column code
(checks/probe/probe.py _Columns) and printed as the probe prints it.

Parse: each output is judged in a fresh worker-like process, as portal/execution/execution.py does it
(run_check, then the check's series), from a CommandOutput holding the text and the bytes the
transport read. Printed: wall seconds (best of 3), the process's peak RSS (VmHWM: interpreter,
output text and bytes, and the parse), and, in a second process, the Python allocation peak of
the parse alone (tracemalloc). Note: a schema 1 output this long (~60 MB) is past the transport's 16 MiB
per-stream cap (worker/transport.py): a real run would have been cut and judged `error`; it is
parsed whole here only to compare.

Store: the 32 series in runs_series as the portal stores them now (portal/runs/services.py
series_rows: packed points, digest, downsampled view) against the same points as the jsonb x/y
lists of before (a peer table with those two columns), sizes as PostgreSQL reports them
(pg_column_size of the point columns, pg_total_relation_size of the table with its TOAST and
indexes). Also the raw output as CheckResult.stdout_raw keeps it (zlib). A throw-away database
(bench_pages.setup_django: DATABASE_URL's server, else SQLite, where sizes are length() sums).

Target (a 12 h burn-in judged and stored about as cheaply as a short one): parse under 2 s and
150 MB in the worker, store under 5 MB.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

GPU_BURN = REPO / "tests" / "fixtures" / "gpu-burn" / "gpu_burn_8xA100-80GB_doubles_tc.txt"
PROFILE = "A100-SXM-8"  # the fixture's GPUs: its fp64 tensor-core rates pass this profile's floors
TARGET_S, TARGET_MB, TARGET_STORED_MB = 2.0, 150.0, 5.0
MB = 1e6


# ----------------------------------------------------------------------------- the outputs


def telemetry(samples: int, gpus: int, interval: float, seed: int = 12) -> list[dict[str, Any]]:
    """One sample dict per tick ({"t", "gpus": [...]}), as the probe's sampler returns them."""
    rng = random.Random(seed)
    temps = [35 + g % 3 for g in range(gpus)]
    out, t = [], 0.0
    for _ in range(samples):
        entries = []
        for g in range(gpus):
            target = 66 + g % 4
            if temps[g] < target and rng.random() < 0.1:
                temps[g] += 1  # the warm-up ramp
            elif rng.random() < 0.05:
                temps[g] = min(target + 2, max(target - 2, temps[g] + rng.choice((-1, 1))))
            capped = rng.random() < 0.15
            entries.append(
                {
                    "index": g,
                    "temp_gpu": temps[g],
                    "temp_memory": None if rng.random() < 1e-4 else temps[g] + 8,
                    "power_w": rng.randint(640_000, 700_000) / 1000.0,  # NVML milliwatts
                    "sm_clock_mhz": 1980 - (15 * rng.randint(1, 4) if capped else 0),
                    "clock_event_reasons": 0x4 if capped else 0,  # sw_power_cap: not judged
                    "ecc_volatile_uncorrected": 0,
                    "ecc_volatile_corrected": 0,
                }
            )
        out.append({"t": round(t, 3), "gpus": entries})
        t += interval + rng.uniform(0.004, 0.009)  # the sampling itself takes a few ms
    return out


def probe_document(gpus: int) -> dict[str, Any]:
    from checks.probe import probe

    doc = probe.new_result()
    doc.update(source="nvml", hostname="gpu001", collected_at="2026-12-01T00:00:00Z", gpu_count=gpus)
    doc.update(driver_version="550.54.15", cuda_version="12.4")
    for index in range(gpus):
        gpu = probe.new_gpu(index)
        gpu["ecc_errors"]["volatile"] = {"corrected": 0, "uncorrected": 0}
        gpu["remapped_rows"] = {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
        gpu["temperature"].update(gpu=35, memory=43, slowdown=87, shutdown=92)
        doc["gpus"].append(gpu)
    return doc


def outputs_text(hours: float, gpus: int, interval: float) -> tuple[str, str]:
    """(schema 2 text, schema 1 text) of the same run."""
    from checks.probe import probe

    samples = telemetry(int(hours * 3600 / interval), gpus, interval)
    doc = probe._new_sampling_doc(interval)
    doc["before"], doc["after"] = probe_document(gpus), probe_document(gpus)
    duration = int(hours * 3600)
    stdout = GPU_BURN.read_text()
    doc["child"] = {"argv": ["gpu_burn", "-d", "-tc", str(duration)], "exit_code": 0, "stdout": stdout,
                    "stderr": "", "duration_s": float(duration)}  # fmt: skip
    columns = probe._Columns()
    for sample in samples:
        columns.add(sample)
    new = json.dumps({**doc, "samples": columns.document()}, separators=(",", ":")) + "\n"
    old = json.dumps({**doc, "schema": 1, "samples": samples}) + "\n"  # as older probes printed it
    return new, old


# ----------------------------------------------------------------------------- parse (child process)


def parse_in_worker(path: Path, hours: float, interval: float, traced: bool, repeat: int = 3) -> dict[str, Any]:
    """Judge one output file as the worker does, `repeat` times (each from a fresh CommandOutput:
    nothing read before is reused); the best time, and this process's memory."""
    from checks import get_check, run_check
    from checks.core.base import Command, CommandOutput, NodeContext
    from checks.core.profiles import resolve_thresholds
    from checks.core.sampling import SAMPLING_LABEL

    check = get_check("burn_in")
    params = {"duration_s": int(hours * 3600), "sample_interval_s": interval, "use_doubles": True,
              "use_tensor_cores": True}  # fmt: skip
    thresholds = resolve_thresholds("burn_in", PROFILE)
    command = check.commands(check.make_params(params), NodeContext(hostname="gpu001"))[0]
    assert command.label == SAMPLING_LABEL
    data = path.read_bytes()
    text = data.decode()
    rss_before = peak_rss_mb()
    if traced:
        tracemalloc.start()
    times = []
    for _ in range(1 if traced else repeat):
        output = CommandOutput(Command(command.argv, command.timeout, label=SAMPLING_LABEL), text, "", 0,
                               stdout_bytes=data)  # fmt: skip
        started = time.perf_counter()
        measurements, verdict = run_check(check, params, thresholds, [output], NodeContext(hostname="gpu001"))
        series = check.series([output])  # portal/execution/execution.py series_of
        times.append(time.perf_counter() - started)
        counts = (len(series), sum(len(s.y) for s in series))
        del output, series  # the next round starts from nothing read
    peak = tracemalloc.get_traced_memory()[1] / MB if traced else None
    return {
        "seconds": min(times),
        "rss_mb": peak_rss_mb(),
        "rss_before_mb": rss_before,
        "traced_mb": peak,
        "verdict": f"{verdict.status}: {verdict.reason[:100]}",
        "measurements": sorted(json.dumps([m.name, m.gpu, m.value, m.text]) for m in measurements),
        "series": counts[0],
        "points": counts[1],
    }


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB: VmHWM, the high-water mark of its own address
    space (ru_maxrss would also count the parent's, inherited through fork and exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / MB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB  # not Linux: KiB elsewhere too


def parse_measured(path: Path, hours: float, interval: float) -> dict[str, Any]:
    """Two fresh processes: one timed (and its RSS), one under tracemalloc (slower, not timed)."""
    runs = []
    for traced in (False, True):
        argv = [sys.executable, __file__, "--parse", str(path), "--hours", str(hours), "--interval", str(interval)]
        done = subprocess.run(argv + (["--traced"] if traced else []), capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout))
    timed, traced_run = runs
    timed["traced_mb"] = traced_run["traced_mb"]
    return timed


# ----------------------------------------------------------------------------- store (Django)


def _jsonb_peer(cursor: Any, vendor: str) -> None:
    """The points as runs_series held them before: jsonb lists (text on SQLite)."""
    if vendor == "postgresql":
        cursor.execute("CREATE TABLE bench_series_jsonb (id serial PRIMARY KEY, x jsonb, y jsonb)")
    else:
        cursor.execute("CREATE TABLE bench_series_jsonb (id integer PRIMARY KEY, x text, y text)")


def store(text: str) -> dict[str, Any]:
    """Store the series of one schema 2 output both ways; sizes in the database."""
    from django.db import connection

    from checks.core.sampling import parse_sampling
    from portal.runs.models import Series
    from portal.runs.services import series_rows

    series = parse_sampling(text).series()
    result = _one_result()
    started = time.perf_counter()
    rows = series_rows(series)
    Series.objects.bulk_create(Series(result=result, **row) for row in rows)
    packed_s = time.perf_counter() - started
    vendor = connection.vendor
    with connection.cursor() as cursor:
        _jsonb_peer(cursor, vendor)
        started = time.perf_counter()
        for s in series:
            cursor.execute("INSERT INTO bench_series_jsonb (x, y) VALUES (%s, %s)", [json.dumps(s.x), json.dumps(s.y)])
        jsonb_s = time.perf_counter() - started
        size = "pg_column_size" if vendor == "postgresql" else "length"
        cursor.execute(f"SELECT sum({size}(x_packed) + {size}(y_packed) + {size}(view_packed)) FROM runs_series")
        packed_bytes = cursor.fetchone()[0]
        cursor.execute(f"SELECT sum({size}(x) + {size}(y)) FROM bench_series_jsonb")
        jsonb_bytes = cursor.fetchone()[0]
        tables = {}
        if vendor == "postgresql":
            for table in ("runs_series", "bench_series_jsonb"):
                cursor.execute("SELECT pg_total_relation_size(%s)", [table])
                tables[table] = cursor.fetchone()[0]
    return {"packed_s": packed_s, "jsonb_s": jsonb_s, "packed_bytes": packed_bytes, "jsonb_bytes": jsonb_bytes,
            "tables": tables, "vendor": vendor}  # fmt: skip


def _one_result() -> Any:
    from portal.inventory.models import Cluster, Node
    from portal.runs.models import CheckResult, Run

    cluster = Cluster.objects.create(name="bench", profile=PROFILE, transport="local")
    node = Node.objects.create(cluster=cluster, hostname="gpu001")
    run = Run.objects.create(cluster=cluster, plan_snapshot={"slug": "bench", "items": []}, status="pass")
    return CheckResult.objects.create(run=run, node=node, item_key="burn-in", kind="burn_in", status="pass")


def raw_size(text: str) -> int:
    """The output's bytes as CheckResult.stdout_raw keeps them (zlib, portal/runs/rawoutput.py)."""
    import zlib

    from portal.runs.rawoutput import COMPRESS_LEVEL

    return len(zlib.compress(text.encode(), COMPRESS_LEVEL))


# ----------------------------------------------------------------------------- report


def _ratio(new: float, old: float) -> str:
    return f"{new / old:.3f}" if old else "-"


def report(
    args: argparse.Namespace, sizes: dict[str, int], parsed: dict[str, dict[str, Any]], stored: dict[str, Any]
) -> None:
    new, old = parsed["new"], parsed["old"]
    print(f"# {args.hours:g} h at {args.interval:g} s on {args.gpus} GPUs: {new['points'] // max(1, new['series']):,} "
          f"points x {new['series']} series; store on {stored['vendor']}")  # fmt: skip
    print(f"{'':34}{'new (schema 2)':>16}{'old (schema 1)':>16}{'new/old':>9}")
    rows = [
        ("probe output, MB", sizes["new"] / MB, sizes["old"] / MB),
        ("parse in the worker, s", new["seconds"], old["seconds"]),
        ("worker process peak RSS, MB", new["rss_mb"], old["rss_mb"]),
        ("  of which before the parse, MB", new["rss_before_mb"], old["rss_before_mb"]),
        ("parse allocations peak, MB", new["traced_mb"], old["traced_mb"]),
        ("series stored (points), MB", stored["packed_bytes"] / MB, stored["jsonb_bytes"] / MB),
        ("series write, s", stored["packed_s"], stored["jsonb_s"]),
    ]
    if stored["tables"]:
        rows.append(("series table+TOAST+index, MB", stored["tables"]["runs_series"] / MB,
                     stored["tables"]["bench_series_jsonb"] / MB))  # fmt: skip
    rows.append(("raw output (zlib, stdout_raw), MB", sizes["new_raw"] / MB, sizes["old_raw"] / MB))
    for label, a, b in rows:
        print(f"{label:34}{a:16.3f}{b:16.3f}{_ratio(a, b):>9}")
    same = new["measurements"] == old["measurements"]
    print(f"verdicts: new {new['verdict']!r}; old {old['verdict']!r}; same measurements: {same}")
    ok = new["seconds"] < TARGET_S and new["rss_mb"] < TARGET_MB and stored["packed_bytes"] / MB < TARGET_STORED_MB
    print(f"target (parse < {TARGET_S:g} s and < {TARGET_MB:g} MB, store < {TARGET_STORED_MB:g} MB): "
          f"parse {new['seconds']:.2f} s, {new['rss_mb']:.0f} MB peak RSS, stored {stored['packed_bytes'] / MB:.2f} MB"
          f" -> {'met' if ok else 'MISSED'}")  # fmt: skip
    if sizes["old"] > 16 * 1024 * 1024:
        print("note: the schema 1 output is past the transport's 16 MiB cap: a real run would have been cut (error)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hours", type=float, default=12.0)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--keep", type=Path, help="write the two outputs into this folder and keep them")
    parser.add_argument("--parse", type=Path, help=argparse.SUPPRESS)  # the child process
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.parse:
        print(json.dumps(parse_in_worker(args.parse, args.hours, args.interval, args.traced)))
        return
    folder = args.keep or Path(tempfile.mkdtemp(prefix="kiln-bench-telemetry-"))
    folder.mkdir(parents=True, exist_ok=True)
    new_text, old_text = outputs_text(args.hours, args.gpus, args.interval)
    paths = {"new": folder / "sampling-schema2.json", "old": folder / "sampling-schema1.json"}
    paths["new"].write_text(new_text)
    paths["old"].write_text(old_text)
    sizes = {"new": len(new_text.encode()), "old": len(old_text.encode())}
    sizes.update(new_raw=raw_size(new_text), old_raw=raw_size(old_text))
    del old_text
    parsed = {name: parse_measured(path, args.hours, args.interval) for name, path in paths.items()}
    from bench.bench_pages import setup_django

    teardown, _ = setup_django()
    try:
        stored = store(new_text)
    finally:
        teardown()
    report(args, sizes, parsed, stored)
    if not args.keep:
        for path in paths.values():
            path.unlink()
        folder.rmdir()


if __name__ == "__main__":
    main()
