"""fio's JSON output (`--output-format=json`, one node or client mode) read into the measurements
checks/fs/throughput.py judges (its docstring lists them), and the `fio` parser."""

from __future__ import annotations

import json
import re
from typing import Any

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser

ALL_CLIENTS = "All clients"  # fio's summed entry in client mode (client.c handle_ts)


def load_fio_json(text: str) -> dict[str, Any]:
    """The fio JSON document in `text`, skipping noise before it (fio prints warnings such as
    "fio: io_u error" or, in client mode, "<host> ..." lines before the JSON)."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"^\s*\{", text, re.MULTILINE):
        start = text.index("{", match.start())
        try:
            doc, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        except RecursionError:  # nesting no real result has; trying every later '{' would be quadratic
            raise EvidenceError("fio output holds JSON nested too deeply to be a real result") from None
        if isinstance(doc, dict) and ("jobs" in doc or "client_stats" in doc):
            return doc
    head = text.strip()[:80]
    raise EvidenceError(f"fio output holds no JSON result (--output-format=json): {head!r}")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _p99(stats: Any) -> float | None:
    if not isinstance(stats, dict):
        return None
    pct = stats.get("percentile")
    return _num(pct.get("99.000000")) if isinstance(pct, dict) else None


def fio_measurements(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    """Per-job and summed measurements from one fio JSON document (local or client mode)."""
    warnings: list[str] = []
    client_mode = "client_stats" in doc
    entries = doc.get("client_stats") if client_mode else doc.get("jobs")
    if not isinstance(entries, list):
        raise EvidenceError("fio JSON has no 'jobs' list")
    out: list[Measurement] = []
    sums: dict[tuple[str, str], float] = {}  # (host, name) -> sum; host "" = everything
    judged = 0
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        job = str(entry.get("jobname", ""))
        if client_mode and job == ALL_CLIENTS:
            continue  # fio's own sum; we sum per host ourselves and keep attribution
        host = str(entry.get("hostname", "")) if client_mode else ""
        base = {"job": job, **({"host": host} if client_mode else {})}
        if entry.get("error"):
            warnings.append(f"fio job {job!r}{' on ' + host if host else ''} reported error {entry['error']}")
            out.append(Measurement(name="job_error", value=float(entry["error"]), labels=dict(base)))
        for ddir in ("read", "write"):
            stats = entry.get(ddir)
            if not isinstance(stats, dict):
                continue
            found, totals = _direction(stats, ddir, job, base)
            out += found
            for key, value in totals.items():
                for scope in {"", host}:
                    sums[(scope, key)] = sums.get((scope, key), 0.0) + (value or 0.0)
        judged += 1
    if not judged:
        raise EvidenceError("fio produced no job results")
    units = {"bw": "B/s", "iops": "IOPS", "bytes": "B"}
    for (scope, key), value in sorted(sums.items()):
        unit = units[key.split("_")[1]]
        out.append(Measurement(name=key, value=value, unit=unit, labels={"host": scope} if scope else {}))
    return out, warnings


def _direction(
    stats: dict[str, Any], ddir: str, job: str, base: dict[str, str]
) -> tuple[list[Measurement], dict[str, float | None]]:
    """One job's read or write section: bandwidth, IOPS, bytes and p99 latencies, and the values
    the per-host and overall sums add up."""
    bw = _num(stats.get("bw_bytes"))
    old_bw = _num(stats.get("bw"))
    if bw is None and old_bw is not None:
        bw = old_bw * 1024  # pre-3.x fio: bw only, in KiB/s
    iops = _num(stats.get("iops"))
    io_bytes = _num(stats.get("io_bytes"))
    if bw is None or iops is None:
        raise EvidenceError(f"fio job {job!r}: {ddir} section has no bw_bytes/iops")
    out = [
        Measurement(name=f"{ddir}_bw", value=bw, unit="B/s", labels=dict(base)),
        Measurement(name=f"{ddir}_iops", value=iops, unit="IOPS", labels=dict(base)),
    ]
    optional = (
        (f"{ddir}_bytes", io_bytes, "B"),
        (f"{ddir}_clat_p99", _p99(stats.get("clat_ns")), "ns"),
        # present when fio ran with lat_percentiles=1: the percentiles move to lat_ns
        (f"{ddir}_lat_p99", _p99(stats.get("lat_ns")), "ns"),
    )
    out += [Measurement(name=n, value=v, unit=u, labels=dict(base)) for n, v, u in optional if v is not None]
    return out, {f"{ddir}_bw_sum": bw, f"{ddir}_iops_sum": iops, f"{ddir}_bytes_sum": io_bytes}


@register_parser("fio")
def parse_fio(text: str) -> Parsed:
    measurements, warnings = fio_measurements(load_fio_json(text))
    return Parsed(measurements, warnings)
