"""burn_in's telemetry measurements (checks/burnin/check.py): per-GPU summaries of the probe's samples
during the burn and of its before/after documents. The full curves go to Series."""

from __future__ import annotations

from typing import Any

from checks.core.base import Measurement
from checks.core.sampling import JUDGED_CLOCK_REASONS, SamplingDoc, probe_gpu


def telemetry_measurements(doc: SamplingDoc) -> list[Measurement]:
    """Per-GPU summaries of the samples and before/after probes (the full curves go to Series)."""
    before_count = doc.before.get("gpu_count") if doc.before else None
    count = Measurement(name="probe_gpu_count", unit="GPUs")
    if isinstance(before_count, int) and not isinstance(before_count, bool):
        count.value = float(before_count)
    else:
        count.labels["missing"] = "no GPU count in the probe taken before the burn"
    out = [
        count,
        Measurement(name="sample_count", value=float(doc.sample_count)),
        Measurement(name="sample_interval_s", value=doc.interval_s, unit="s"),
    ]
    out += [Measurement(name="sampling_error", text=e) for e in doc.errors]
    steady_from = doc.steady_start()
    for index in doc.gpu_indices():
        for name, unit in (("temp_gpu", "C"), ("temp_memory", "C"), ("power_w", "W")):
            stats = doc.stats(index, name)
            m = Measurement(name=f"{name}_max", value=stats.max, unit=unit, gpu=index)
            if stats.max is None:
                m.labels["missing"] = f"{name} unreadable in every sample"
            out.append(m)
        power = doc.stats(index, "power_w", since_t=steady_from)
        out.append(Measurement(name="power_w_steady_mean", value=_round(power.mean), unit="W", gpu=index))
        clock = doc.stats(index, "sm_clock_mhz", since_t=steady_from)
        out.append(Measurement(name="sm_clock_mhz_steady_min", value=clock.min, unit="MHz", gpu=index))
        out.append(Measurement(name="sm_clock_mhz_steady_mean", value=_round(clock.mean), unit="MHz", gpu=index))
        reasons = doc.stats(index, "clock_event_reasons")
        out.append(Measurement(name="clock_event_reasons_readable", value=float(reasons.count), gpu=index))
        for name, field_name in (
            ("ecc_new_uncorrected", "ecc_volatile_uncorrected"),
            ("ecc_new_corrected", "ecc_volatile_corrected"),
        ):
            new = doc.ecc_increase(index, field_name)
            m = Measurement(name=name, value=None if new is None else float(new), gpu=index)
            if new is None:
                m.labels["missing"] = "volatile ECC count unreadable before, during and after the burn"
            out.append(m)
        out.append(_remap_delta(doc, index))
    for event in doc.throttle_events(JUDGED_CLOCK_REASONS):
        out.append(
            Measurement(
                name="throttle_event",
                value=round(event.end_t - event.start_t, 3),
                unit="s",
                gpu=event.gpu,
                text=event.reason,
                labels={"start_t": f"{event.start_t:g}", "end_t": f"{event.end_t:g}", "when": event.describe()},
            )
        )
    return out


def _remap_delta(doc: SamplingDoc, index: int) -> Measurement:
    def total(probe: dict[str, Any] | None) -> int | None:
        rows = probe_gpu(probe, index).get("remapped_rows")
        if not isinstance(rows, dict):
            return None
        raw = (rows.get("correctable"), rows.get("uncorrectable"))
        values = [v for v in raw if isinstance(v, int) and not isinstance(v, bool)]
        if len(values) != len(raw):
            return None
        return values[0] + values[1]

    first, last = total(doc.before), total(doc.after)
    m = Measurement(name="row_remaps_new", gpu=index)
    if first is None or last is None:
        m.labels["missing"] = "remapped rows not reported before and after the burn"
    else:
        m.value = float(max(0, last - first))
    return m


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
