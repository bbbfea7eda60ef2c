"""Helpers for the history page tests: a trend chart of a response, a node's results filled in."""

from __future__ import annotations

from portal.runs.models import Run
from tests.portal.helpers import add_measurement, set_result


def chart_of(response, key: str) -> dict:
    return next(c["figure"] for c in response.context["charts"] if c["div"] == f"trend-{key}")


def fill(run: Run, hostname: str, *, busbw: float, gflops: list[float], ecc_uncorrected: int = 0) -> None:
    nccl = set_result(run, hostname, "nccl-allreduce", "pass" if busbw >= 460 else "fail")
    add_measurement(nccl, "busbw_peak", value=busbw, unit="GB/s", threshold=">= 460", ok=busbw >= 460)
    burn = set_result(run, hostname, "burn-in", "pass")
    for gpu, value in enumerate(gflops):
        add_measurement(burn, "gflops", value=value, unit="Gflop/s", gpu=gpu, ok=True)
    ecc = set_result(run, hostname, "ecc-health", "fail" if ecc_uncorrected else "pass")
    add_measurement(ecc, "ecc_volatile_uncorrected", value=ecc_uncorrected, gpu=0, ok=not ecc_uncorrected)
