"""How issuing an acceptance certificate scales: 1,250 nodes × 8 checks, against a 16-node peer.

    python bench/bench_certificate.py [--nodes 1250] [--peer 16] [--series-points 600]
                                      [--stdout-bytes 2048] [--chart-timeout S] [--tracemalloc]

Seeds its own database, as bench_pages.py does (a fresh SQLite file in a temporary folder, or with
DATABASE_URL a throw-away database on that server); the site signing keys are made (kiln_keys init) in the
temporary data folder (KILN_KEY_DIR is ignored), and the folder is removed
at the end. Each cluster gets serials, racks and positions, one finished run of the 8-check plan
where every result passes, with about 90 measurements per node (GPU UUIDs and serials from the
inventory, per-GPU burn-in, temperature, ECC and link figures, a few software and fabric ones), a raw
output of --stdout-bytes per result, and Series: 8 GPUs × 3 burn-in metrics × --series-points
points, plus one NCCL busbw curve, per node. An acceptance campaign is then opened over that run
with portal.certificates.services.

Timed per cluster, in this process, after an untimed warm-up issue on a 2-node cluster (imports,
fonts, the kaleido server): campaign_state, the campaign page (GET as an approver, server time),
payload.body_build, seal.canonical_bytes of the body
(and its size), and the issue path: the vendor approver's certificate_sign (pending), the
customer's (the request: it digests the body and queues the issue), then the certificate_issue task
a worker runs (state, body digested twice: before rendering and again under the lock, charts,
WeasyPrint PDF, its PAdES signature, database writes; broken down by wrapping those functions), then the same again
with charts turned off
(KILN_CERT_CHARTS=0), certificate_verify of the PDF, and the evidence export (streamed to a file, as
kiln_evidence writes it) checked against the sealed digests. The last line extrapolates body size
and issue time to 12,500 nodes against the targets (< 50 MB, < 5 min). Wall seconds; memory as the process's peak
RSS (ru_maxrss) after each step, or with --tracemalloc the Python allocation peak of the step
(slower). The table gives each step at N nodes and at the peer, their ratio, and the marginal cost
per node ((t_N - t_peer) / (N - peer)). Pages of the PDF come from `pdfinfo` when installed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_pages import setup_django  # noqa: E402  (same plan, same throw-away database)
from bench.certificate_seed import seed_campaign  # noqa: E402


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class Probe:
    """Wraps module-level functions the issue path calls, to time each one (wall seconds, summed)."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.captured: dict[str, Any] = {}

    def reset(self) -> None:
        self.times, self.calls, self.captured = {}, {}, {}

    def wrap(self, module: Any, attr: str, label: str, capture: bool = False) -> None:
        original = getattr(module, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                out = original(*args, **kwargs)
            finally:
                self.times[label] = self.times.get(label, 0.0) + time.perf_counter() - t0
                self.calls[label] = self.calls.get(label, 0) + 1
            if capture:
                self.captured[label] = out
            return out

        setattr(module, attr, timed)


class Step:
    """Times a block: wall seconds, peak RSS after it, and (with tracemalloc on) its Python peak."""

    def __init__(self, use_tracemalloc: bool) -> None:
        self.use_tracemalloc = use_tracemalloc

    def __enter__(self) -> Step:
        gc.collect()
        if self.use_tracemalloc:
            tracemalloc.reset_peak()
            self.base = tracemalloc.get_traced_memory()[0]
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.rss = _rss_mb()
        self.py_peak = (tracemalloc.get_traced_memory()[1] - self.base) / 2**20 if self.use_tracemalloc else None


def pdf_pages(data: bytes, folder: str) -> int | None:
    if not shutil.which("pdfinfo"):
        return None
    path = Path(folder) / "bench-certificate.pdf"
    path.write_bytes(data)
    try:
        out = subprocess.run(["pdfinfo", str(path)], capture_output=True, text=True, timeout=120).stdout
    finally:
        path.unlink(missing_ok=True)
    for line in out.splitlines():
        if line.startswith("Pages:"):
            return int(line.split()[1])
    return None


def payload_breakdown(body: dict[str, Any]) -> dict[str, int]:
    """Canonical bytes of the body by part: check summaries, evidence digests, GPU identities, the rest."""
    from portal.certificates import seal

    checks = digests = gpus = 0
    for node in body["nodes"]:
        gpus += len(seal.canonical_bytes(node["gpus"]))
        checks += len(seal.canonical_bytes(node["checks"]))
        digests += len(f'"evidence_sha256":"{node.get("evidence_sha256", "")}",')
    total = len(seal.canonical_bytes(body))
    return {
        "total": total,
        "check summaries": checks,
        "evidence digests": digests,
        "gpu identities": gpus,
        "other": total - checks - digests - gpus,
    }


def measure_campaign(
    seeded: dict[str, Any], users: dict[str, Any], probe: Probe, *, use_tracemalloc: bool, tmp: str
) -> dict[str, Any]:
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    from portal.certificates import export, keys, payload, seal, selectors, services, verification
    from portal.certificates.models import Certificate, Signature

    campaign = seeded["campaign"]
    out: dict[str, Any] = {"steps": {}, "notes": {}}

    def record(label: str, step: Step, extra: str = "") -> None:
        out["steps"][label] = (step.seconds, step.rss, step.py_peak, extra)

    with CaptureQueriesContext(connection) as q, Step(use_tracemalloc) as s:
        state = selectors.campaign_state(campaign=campaign)
    record("campaign_state", s, f"{len(q)} queries")
    client = Client()
    client.force_login(users["vendor"])
    page_url = reverse("certificates:campaign_detail", args=[campaign.pk])
    client.get(page_url)  # warm-up (templates, session)
    with CaptureQueriesContext(connection) as q, Step(use_tracemalloc) as s:
        page = client.get(page_url)
    assert page.status_code == 200, page.status_code
    record("campaign page GET (server time)", s, f"{len(q)} queries, {len(page.content) // 1024} KiB")
    assert state.ready, state.blockers
    with CaptureQueriesContext(connection) as q, Step(use_tracemalloc) as s:
        body = payload.body_build(state=state)
    record("payload.body_build", s, f"{len(q)} queries")
    with Step(use_tracemalloc) as s:
        body_bytes = seal.canonical_bytes(body)
    size_mb = len(body_bytes) / 2**20
    record("seal.canonical_bytes(body)", s, f"{size_mb:.2f} MB")
    out["body_mb"] = size_mb
    out["breakdown"] = payload_breakdown(body)
    del body, body_bytes, state

    def sign_pair(tag: str) -> Certificate:
        probe.reset()
        with Step(use_tracemalloc) as s:
            first = services.certificate_sign(campaign=campaign, user=users["vendor"])
        assert isinstance(first, Signature), first
        parts = ", ".join(f"{k} {v:.2f}" for k, v in probe.times.items())
        record(f"certificate_sign #1 vendor (pending){tag}", s, parts)
        probe.reset()
        with Step(use_tracemalloc) as s:
            second = services.certificate_sign(campaign=campaign, user=users["customer"])
        assert isinstance(second, Signature), second
        parts = ", ".join(f"{k} {v:.2f}" for k, v in probe.times.items())
        record(f"certificate_sign #2 customer (request){tag}", s, parts)
        probe.reset()
        with Step(use_tracemalloc) as s:  # the task behind the second signature, in a worker
            cert = services.certificate_issue(campaign_id=campaign.pk)
        assert isinstance(cert, Certificate), cert
        timed = dict(probe.times)
        rest = s.seconds - sum(timed.values())
        record(f"certificate_issue task{tag}", s, ", ".join(f"{k} {v:.2f}" for k, v in timed.items()))
        for key, value in timed.items():
            out["steps"][f"  of which {key}{tag}"] = (value, None, None, "")
        out["steps"][f"  of which the rest (payload, seal, DB writes){tag}"] = (rest, None, None, "")
        return cert

    cert = sign_pair(" [charts on]")
    out["notes"]["charts"] = cert.charts_note or "charts rendered"
    out["pdf_mb"] = len(cert.pdf) / 2**20
    out["payload_mb"] = len(cert.payload.encode("utf-8")) / 2**20
    out["pages"] = pdf_pages(bytes(cert.pdf), tmp)
    # Issuing closes the campaign, so the charts-off variant renders and signs the same body again
    # without recording it (state, body, payload, seal, PDF, PDF signature; no database writes).
    previous = getattr(settings, "KILN_CERT_CHARTS", None)
    settings.KILN_CERT_CHARTS = "0"
    try:
        state = selectors.campaign_state(campaign=campaign)
        signatures = list(cert.signatures.select_related("user").order_by("id"))
        probe.reset()
        with Step(use_tracemalloc) as s:
            _, _, document_off, _ = services.issuing._render(
                body=payload.body_build(state=state), state=state, number=cert.number + "-off",
                issued_at=cert.issued_at, signatures=signatures, identity=keys.signing_identity_load(),
            )  # fmt: skip
        record("render and sign only [charts off]", s, ", ".join(f"{k} {v:.2f}" for k, v in probe.times.items()))
    finally:
        if previous is None:
            del settings.KILN_CERT_CHARTS
        else:
            settings.KILN_CERT_CHARTS = previous
    out["pdf_mb_off"] = len(document_off) / 2**20
    out["pages_off"] = pdf_pages(document_off, tmp)
    data = bytes(cert.pdf)
    with Step(use_tracemalloc) as s:
        verdict = verification.certificate_verify(data=data, digests=True)
    record("certificate_verify(pdf)", s, verdict.status)
    export_path = Path(tmp) / "bench-evidence.jsonl"
    with CaptureQueriesContext(connection) as q, Step(use_tracemalloc) as s, export_path.open("wb") as f:
        lines = export.evidence_lines(payload=json.loads(cert.payload), payload_sha256=cert.sha256)
        f.writelines(lines)  # streamed to disk, as kiln_evidence does
    out["export_mb"] = export_path.stat().st_size / 2**20
    record("evidence export (JSON lines)", s, f"{len(q)} queries, {out['export_mb']:.1f} MB")
    with Step(use_tracemalloc) as s, export_path.open("rb") as stream:
        checked = verification.evidence_check(verdict=verdict, lines=stream)
    export_path.unlink()
    assert checked.ok, checked.detail
    record("evidence export checked against the seal", s, checked.detail[:60])
    out["notes"]["verify"] = f"{verdict.status}: {verdict.detail}" if hasattr(verdict, "detail") else verdict.status
    return out


# The certificate at scale: 12,500 nodes, a body under 50 MB, issued within 5 minutes.
TARGET_NODES, TARGET_BODY_MB, TARGET_ISSUE_S = 12_500, 50.0, 300.0


def print_targets(results: dict[str, Any], n: int, p: int) -> None:
    """Linear extrapolation to 12,500 nodes from the marginal cost per node (N against the peer)."""
    if n == p:
        return

    def at_target(big: float, peer: float) -> float:
        return peer + (big - peer) / (n - p) * (TARGET_NODES - p)

    body = at_target(results["big"]["body_mb"], results["peer"]["body_mb"])
    label = "certificate_issue task [charts on]"
    issue = at_target(results["big"]["steps"][label][0], results["peer"]["steps"][label][0])
    print(
        f"at {TARGET_NODES:,} nodes (linear from the marginal cost per node; measured at {TARGET_NODES:,} only "
        f"with --nodes {TARGET_NODES}): body {body:.1f} MB (target < {TARGET_BODY_MB:.0f} MB: "
        f"{'met' if body < TARGET_BODY_MB else 'MISSED'}), issue task {issue:.0f} s (target < {TARGET_ISSUE_S:.0f} s: "
        f"{'met' if issue < TARGET_ISSUE_S else 'MISSED'})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--peer", type=int, default=16)
    parser.add_argument("--series-points", type=int, default=600, help="points per burn-in Series (8 GPUs × 3)")
    parser.add_argument("--stdout-bytes", type=int, default=2048, help="raw output stored per result")
    parser.add_argument("--chart-timeout", type=float, default=None, help="KILN_CERT_CHART_TIMEOUT_S (default 60)")
    parser.add_argument("--tracemalloc", action="store_true", help="per-step Python allocation peaks (slower)")
    args = parser.parse_args()

    for name in ("KILN_KEY_DIR", "KILN_CERT_CHARTS"):
        os.environ.pop(name, None)  # the key goes to the throw-away data folder; charts at their default
    if os.environ.get("DATABASE_URL"):
        os.environ["KILN_DATA_DIR"] = tempfile.mkdtemp(prefix="kiln-bench-")
    teardown, described = setup_django()
    from django.conf import settings
    from django.db import connection

    data_dir = str(settings.DATA_DIR)
    try:
        from django.contrib.auth.models import Group, User

        from portal.certificates import charts, keys, pdf, services, signing
        from portal.roles import APPROVER

        assert str(keys.key_dir()).startswith(data_dir), keys.key_dir()
        keys.keyring_init(site="bench")
        if args.chart_timeout is not None:
            settings.KILN_CERT_CHART_TIMEOUT_S = str(args.chart_timeout)

        def user(username: str, *groups: str) -> Any:
            u = User.objects.create_user(username, password="x", first_name=username.title(), last_name="Bench")
            for group in groups:
                u.groups.add(Group.objects.get_or_create(name=group)[0])
            return u

        users = {"vendor": user("vera", APPROVER, "vendor"), "customer": user("carl", APPROVER, "customer")}
        probe = Probe()
        probe.wrap(services.issuing, "campaign_state", "state")  # the names the issuing module calls
        probe.wrap(services.issuing, "body_build", "body")
        probe.wrap(services.issuing, "body_digest", "digest")
        probe.wrap(charts, "charts_render", "charts")
        probe.wrap(pdf, "pdf_render", "pdf")
        probe.wrap(signing, "pdf_sign", "pdf signature")

        rng = random.Random(42)
        seed = {"rng": rng, "series_points": args.series_points, "stdout_bytes": args.stdout_bytes}
        warm = seed_campaign("warm", 2, user=users["vendor"], **seed)
        t0 = time.perf_counter()
        services.certificate_sign(campaign=warm["campaign"], user=users["vendor"])
        services.certificate_sign(campaign=warm["campaign"], user=users["customer"])
        services.certificate_issue(campaign_id=warm["campaign"].pk)
        print(f"database: {described}; data dir {data_dir}; warm-up issue (2 nodes) {time.perf_counter() - t0:.1f} s")

        t0 = time.perf_counter()
        big = seed_campaign("big", args.nodes, user=users["vendor"], **seed)
        t_big = time.perf_counter() - t0
        peer = seed_campaign("peer", args.peer, user=users["vendor"], **seed)
        if connection.vendor == "postgresql":
            # Table statistics, as autovacuum keeps them on a live site: without them the planner
            # guesses at 100x more rows than the seeding's empty tables had and picks scans.
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        c = big["counts"]
        print(
            f"seeded {args.nodes} nodes in {t_big:.1f} s: {c['results']} results, {c['measurements']} measurements "
            f"({c['measurements'] / args.nodes:.0f}/node), {c['series']} series, {c['points']:,} points "
            f"({args.series_points}/burn-in series); peer {args.peer} nodes; RSS peak {_rss_mb():.0f} MB"
        )
        if args.tracemalloc:
            tracemalloc.start()
        # The peer first: the process's peak RSS then grows with the big campaign only.
        results = {"peer": measure_campaign(peer, users, probe, use_tracemalloc=args.tracemalloc, tmp=data_dir)}
        results["big"] = measure_campaign(big, users, probe, use_tracemalloc=args.tracemalloc, tmp=data_dir)

        n, p = args.nodes, args.peer
        width = max(len(k) for k in results["big"]["steps"]) + 2
        mem = "py peak MB" if args.tracemalloc else "RSS peak MB"
        print()
        print(f"{'step':<{width}} | {n:>5} nodes s | {p:>4} nodes s |  ratio | ms/node (marginal) | {mem:>11} | detail")
        for label, (sec, rss, py, extra) in results["big"]["steps"].items():
            psec = results["peer"]["steps"].get(label, (float("nan"),))[0]
            ratio = sec / psec if psec else float("nan")
            per_node = (sec - psec) / (n - p) * 1000 if n != p else float("nan")
            memory = py if args.tracemalloc else rss
            shown = f"{memory:>11.0f}" if memory is not None else " " * 11
            print(
                f"{label:<{width}} | {sec:>13.2f} | {psec:>12.3f} | {ratio:>5.1f}x | {per_node:>18.2f} | {shown} "
                f"| {extra}"
            )
        print()
        for label, size in (("big", n), ("peer", p)):
            r = results[label]
            pages = r["pages"] if r["pages"] is not None else "? (no pdfinfo)"
            pages_off = r["pages_off"] if r["pages_off"] is not None else "?"
            b = r["breakdown"]
            parts = ", ".join(f"{k} {v / 2**20:.2f} MB ({v / b['total']:.0%})" for k, v in b.items() if k != "total")
            print(
                f"{size} nodes: body {r['body_mb']:.2f} MB ({r['body_mb'] * 1024 / size:.1f} KiB/node: {parts}); "
                f"evidence export {r['export_mb']:.1f} MB; "
                f"sealed payload {r['payload_mb']:.2f} MB; PDF {r['pdf_mb']:.2f} MB, {pages} pages "
                f"(charts off: {r['pdf_mb_off']:.2f} MB, {pages_off} pages); charts: {r['notes']['charts']}; "
                f"verify: {r['notes']['verify']}"
            )
        print_targets(results, n, p)
        return 0
    finally:
        teardown()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
