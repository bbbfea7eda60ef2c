"""rdma_bw's judgement: every pair's perftest outputs -> its bandwidth and latency against the floors,
then which port, pair or node is to blame (checks/rdma/bw.py is the check, checks/rdma/plan.py the plan).

A pair is `error` when it could not be measured: its node's runner printed nothing usable, a
client or server exited badly or was stopped at its deadline, its output does not parse
(checks/rdma/perftest.py), it ran on another HCA than planned, or GPUDirect was asked for (--use_cuda)
and either end's output shows no GPU buffer. It is `fail` when it ran and is out of spec: its
bandwidth at the largest size below `min_bw_gbps`, its typical latency above
`max_lat_typical_us`, or its link type not the expected one. Its peak (`pair_bw_peak_gbps`) is
recorded, never judged; where perftest measured none (duration mode prints 0.00) it is value None
with `labels["not_measured"]`, never 0 Gb/s.

Localisation, per rail, on the ring (each port is measured twice, as client of its successor and as
server of its predecessor, against two partners):
- a port bad both ways is to blame: `fail` when both of its pairs failed ("verification pair"),
  `error` when they could not be measured (a port whose HCAs could not bring the RDMA connection
  up, perftest's "Unable to Connect the HCA's through the link", was measured: it is down);
- a bad pair neither of whose ports is bad with its other partner is the link between them (cable,
  transceiver, switch path): both ends are named with the pair;
- with two nodes the ring is one pair in both directions: a bad pair names both ends, as no third
  node can tell which one is at fault.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    CommandOutput,
    EvidenceError,
    Measurement,
    Verdict,
    worst_status,
)
from checks.rdma.perftest import NO_PEAK_WHY, PerftestRun, failure_line, parse_perftest, peak_measured
from checks.rdma.plan import BW, LAT, RUNNER_SCHEMA, Pair, RdmaBwParams

# perftest reached its partner over the out-of-band TCP exchange, then the HCAs could not bring the
# RDMA connection up (perftest's ctx_connect: the QP refused to move to RTR on a port without a
# usable link): evidence that the port or its link is down, so `fail`, not "could not tell".
LINK_REFUSED = re.compile(r"Unable to Connect the HCA's through the link|Failed to modify QP(?: \d+)? to RTR")

Processes = dict[tuple[str, str], dict[str, Any]]  # (role, rail) -> the runner's record of that process


@dataclass
class RdmaBwThresholds:
    # Floor of one pair's bandwidth (Gb/s, average at the largest size, one direction); None = not
    # judged. Per hardware in checks/rdma/bw.py PROFILE_THRESHOLDS (NDR 400: 360, HDR 200: 185).
    min_bw_gbps: float | None = None
    # Floor of a node's bandwidth over all its rails (as a sender), per GPU; None = not judged.
    min_bw_per_gpu_gbps: float | None = None
    # Ceiling of one pair's typical ib_write_lat latency (2-byte messages, us): 5x the 0.98 us of a
    # ConnectX-3 QDR pair through an IB switch (tests/fixtures/perftest/ib_write_lat-a-mlx4-ib.txt);
    # any healthy InfiniBand generation since is faster, so 5 us is a broken path, not a slow HCA.
    max_lat_typical_us: float | None = 5.0
    # The link type perftest must report on every pair ("IB" or "Ethernet"); empty = not judged.
    link_type: str = ""


@dataclass
class PairResult:
    """One pair's verdict and measurements."""

    pair: Pair
    status: str = PASS
    reasons: list[str] = field(default_factory=list)
    bw_gbps: float | None = None
    measurements: list[Measurement] = field(default_factory=list)

    def add(self, status: str, reason: str) -> None:
        before = self.status
        self.status = worst_status([self.status, status])
        if self.status != before:
            self.reasons.insert(0, reason)  # `reason` shows the first: the one that set the status
        else:
            self.reasons.append(reason)

    @property
    def reason(self) -> str:
        """The first reason, and how many more (a node names up to 2 findings, a run up to 3 nodes)."""
        more = len(self.reasons) - 1
        return self.reasons[0] + (f" (and {more} more)" if more > 0 else "") if self.reasons else ""


def read_runner(outputs: list[CommandOutput]) -> Processes | str:
    """One node's runner document, by (role, rail); or why there is none to read."""
    if not outputs:
        return "nothing ran"
    out = outputs[-1]
    if out.timed_out:
        return f"the pair runner timed out after {out.command.timeout:g}s"
    if out.exit_code is None:
        return f"no exit code ({_last_line(out.stderr) or 'connection lost?'})"
    if out.exit_code != 0:
        return f"the pair runner exited {out.exit_code}: {_last_line(out.stderr) or 'no stderr'}"
    try:
        doc = json.loads(out.stdout)
    except (ValueError, RecursionError):
        return f"the pair runner's output is not JSON: {out.stdout.strip()[:80]!r}"
    if not isinstance(doc, dict) or doc.get("schema") != RUNNER_SCHEMA or not isinstance(doc.get("processes"), list):
        return "the pair runner's output is not its document (schema 1 with processes)"
    found: Processes = {}
    for proc in doc["processes"]:
        if isinstance(proc, dict) and isinstance(proc.get("role"), str) and isinstance(proc.get("rail"), str):
            found[(proc["role"], proc["rail"])] = proc
    return found


def _last_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def read_process(proc: dict[str, Any] | None, what: str) -> PerftestRun | str:
    """One perftest process's output, parsed; or why it cannot be read."""
    if proc is None:
        return f"{what}: not in its node's runner output"
    text = f"{proc.get('stdout') or ''}\n{proc.get('stderr') or ''}"
    if proc.get("error"):
        return f"{what}: {proc['error']}"
    if proc.get("timed_out"):
        why = failure_line(text)
        return f"{what}: stopped at its deadline{' (' + why + ')' if why else ' (no partner came, or it hung)'}"
    if proc.get("exit_code") != 0:
        why = failure_line(text) or _last_line(str(proc.get("stderr") or "")) or "no stderr"
        return f"{what}: exited {proc.get('exit_code')}: {why}"
    try:
        return parse_perftest(str(proc.get("stdout") or ""))
    except EvidenceError as exc:
        return f"{what}: {exc}"


def judge_pair(
    pair: Pair,
    docs: dict[str, Processes | str],
    params: RdmaBwParams,
    t: RdmaBwThresholds,
) -> PairResult:
    """One pair: its bandwidth (and latency) read from both ends, against the thresholds."""
    result = PairResult(pair)
    ends = {"client": pair.client, "server": pair.server}
    runs: dict[str, PerftestRun] = {}
    tests = ([LAT] if params.measure_latency else []) + [BW]
    for test in tests:
        for end, host in ends.items():
            doc = docs.get(host, "no output")
            if isinstance(doc, str):
                result.add(ERROR, f"{end} {host}: {doc}")
                continue
            run = read_process(doc.get((f"{test}_{end}", pair.hca)), f"{test} {end} on {host}")
            if isinstance(run, str):
                result.add(FAIL if LINK_REFUSED.search(run) else ERROR, run)
            else:
                runs[f"{test}_{end}"] = run
                _check_run(result, run, f"{test} {end} on {host}", params, t)
    _measure(result, runs, t)
    return result


def _check_run(result: PairResult, run: PerftestRun, what: str, params: RdmaBwParams, t: RdmaBwThresholds) -> None:
    hca = result.pair.hca
    if run.device != hca:
        result.add(ERROR, f"{what} ran on {run.device or 'an unnamed device'}, not {hca}")
    if t.link_type and run.header.get("Link type", "") != t.link_type:
        result.add(FAIL, f"{what}: link type {run.header.get('Link type') or 'not printed'}, expected {t.link_type}")
    if params.use_cuda and not (run.cuda.gpu_buffer and not run.cuda.host_buffer):
        result.add(ERROR, f"{what}: GPUDirect asked (--use_cuda) but the output shows {run.cuda.memory} memory")


def _measure(result: PairResult, runs: dict[str, PerftestRun], t: RdmaBwThresholds) -> None:
    pair = result.pair
    labels = {"rail": pair.hca, "client": pair.client, "server": pair.server, "pair": pair.name}
    client = runs.get("bw_client")
    if client is not None and client.kind == "bw":
        row = client.largest
        bw = round(client.gbps(row["bw_avg"]), 4)
        result.bw_gbps = bw
        size = {"size_bytes": str(int(row["bytes"]))}
        bw_m = Measurement(name="pair_bw_gbps", value=bw, unit="Gb/s", labels={**labels, **size})
        peak_m = Measurement("pair_bw_peak_gbps", None, "Gb/s", labels={**labels, **size})
        if peak_measured(client, row):
            peak_m.value = round(client.gbps(row["bw_peak"]), 4)
        else:
            peak_m.labels["not_measured"] = NO_PEAK_WHY  # duration mode: its 0.00 is no peak, never 0 Gb/s
        result.measurements += [bw_m, peak_m]
        if t.min_bw_gbps is not None:
            bw_m.threshold, bw_m.ok = f">= {t.min_bw_gbps:g}", bw >= t.min_bw_gbps
            if not bw_m.ok:
                result.add(FAIL, f"{bw:g} Gb/s below {t.min_bw_gbps:g} Gb/s")
    lat = runs.get("lat_client")
    if lat is not None and lat.kind == "lat":
        row = min(lat.rows, key=lambda r: r["bytes"])
        typical = row.get("t_typical")
        size = {"size_bytes": str(int(row["bytes"]))}
        lat_m = Measurement("pair_lat_typical_us", typical, "us", labels={**labels, **size})
        if typical is None:
            lat_m.labels["missing"] = "no t_typical column"
            result.add(ERROR, "the latency output has no typical latency")
        elif t.max_lat_typical_us is not None:
            lat_m.threshold, lat_m.ok = f"<= {t.max_lat_typical_us:g}", typical <= t.max_lat_typical_us
            if not lat_m.ok:
                result.add(FAIL, f"typical latency {typical:g} us above {t.max_lat_typical_us:g} us")
        result.measurements.append(lat_m)


def localise(results: list[PairResult], hostnames: list[str]) -> dict[str, list[tuple[str, str]]]:
    """host -> (status, reason) findings: ports bad both ways, and bad pairs no port explains."""
    findings: dict[str, list[tuple[str, str]]] = defaultdict(list)
    ring_of_two = len(set(hostnames)) < 3
    by_rail: dict[str, list[PairResult]] = defaultdict(list)
    for r in results:
        by_rail[r.pair.hca].append(r)
    for hca, rail in sorted(by_rail.items()):
        blamed = set() if ring_of_two else _blame_ports(hca, rail, findings)
        for r in rail:
            if r.status == PASS or r.pair.client in blamed or r.pair.server in blamed:
                continue
            if ring_of_two:
                where = "two nodes: cannot tell which end"
            elif r.status == FAIL:
                where = "both HCAs are fine with their other partners: the link between them (cable, optics, switch)"
            else:
                where = "both HCAs measured fine with their other partners: only this pair could not be measured"
            for host in (r.pair.client, r.pair.server):
                findings[host].append((r.status, f"pair {r.pair.name}: {r.reason} ({where})"))
    return findings


def _blame_ports(hca: str, rail: list[PairResult], findings: dict[str, list[tuple[str, str]]]) -> set[str]:
    out = {r.pair.client: r for r in rail}
    into = {r.pair.server: r for r in rail}
    blamed = set()
    for host in sorted(out):
        sent, received = out[host], into.get(host)
        if received is None or sent.status == PASS or received.status == PASS:
            continue
        blamed.add(host)
        status = FAIL if sent.status == FAIL and received.status == FAIL else ERROR
        how = "failing" if status == FAIL else "not measured"
        findings[host].append(
            (
                status,
                f"{hca} of {host} {how} both ways: as client of {sent.pair.server}: {sent.reason}; "
                f"as server of {received.pair.client}: {received.reason}",
            )
        )
    return blamed


def node_verdicts(hostnames: list[str], findings: dict[str, list[tuple[str, str]]], rails: int) -> dict[str, Verdict]:
    verdicts: dict[str, Verdict] = {}
    for host in sorted(hostnames):
        found = findings.get(host, [])
        if not found:
            verdicts[host] = Verdict(PASS, f"{host}: {rails} HCAs within spec as client and as server")
            continue
        status = worst_status([s for s, _ in found])
        found = [f for f in found if f[0] == status] + [f for f in found if f[0] != status]
        text = "; ".join(reason for _, reason in found[:2]) + (f"; and {len(found) - 2} more" if len(found) > 2 else "")
        verdicts[host] = Verdict(status, f"{host}: {text}")
    return verdicts
