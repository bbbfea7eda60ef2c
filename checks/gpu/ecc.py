"""ecc_health: ECC mode, ECC error counters and memory repair state per GPU.

Evidence is the probe JSON. No evidence, no pass:
- zero GPUs listed, an unknown GPU count, or a GPU the driver counts but the
  probe could not read is `error`;
- a required counter that is null is `error` naming the GPU, the counter and
  the probe's reason ("GPU 4: volatile uncorrected ECC count unavailable (Not
  Supported)"). A counter whose threshold is None is recorded, not required.

Memory repair state (the stricter rule, on purpose): every GPU with ECC on
must report either row remapping (Ampere and later) or page retirement
(pre-Ampere). Null remapped rows are accepted only when retired pages are
present. A recorded reason (e.g. "N/A" with MIG enabled) is quoted in the
`error` but does not make it a pass: with neither, a pending repair or an
exhausted spare-row bank would go unseen. An operator who knowingly runs
MIG-partitioned GPUs can set `allow_remap_unavailable`.

A GPU with ECC disabled fails (when required) and its null counters are not
reported again as errors: disabled ECC explains them, and the fail is the
actionable finding.

Kernel log (second command, checks/gpu/xid.py): Xid/SXid events since the run
started (`journalctl -k --since @EPOCH`, else `dmesg --time-format iso`
filtered by time; the whole current boot when NodeContext.since is None).
Events map to GPUs through the probe's pci_bus_id. A `critical` event (per
checks/gpu/xid.XID_CATALOGUE) or a code in `xid_fail_codes` fails ("GPU 3: Xid 79
(GPU has fallen off the bus) at ..."), a `warn` event warns, `info` is
recorded only, codes in `xid_ignore_codes` are recorded and not judged.
NVSwitch SXid events (`sxid` measurements, checks/gpu/xid.SXID_CATALOGUE; the
driver's own "Fatal" is never judged milder) are judged the same way and
named by switch ("NVSwitch 0000:06:00: SXid 20034 (...)"). A
kernel log that cannot be read (no journalctl and no dmesg, permission
denied, journalctl blind to the system journal) is `error` "kernel log
unreadable: ...", never a silent pass. A GPU that stopped answering the probe
after a critical Xid is a `fail` (the Xid explains it), not an `error`.
Outputs without the kernel log command (a probe file given to `python -m
checks parse`) are judged on the probe alone; the pass reason then does not
mention Xids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    WARN,
    Command,
    CommandOutput,
    Finding,
    Measurement,
    NodeContext,
    ParamsError,
    Verdict,
    register,
)
from checks.core.evidence import COUNT, FLAG, Rule
from checks.core.presentation import (
    ENABLE_ECC,
    RESET_GPU,
    RMA,
    CounterTable,
    FleetMetric,
    KeyMetric,
    Presentation,
    PromMetric,
    Remedy,
    TrendRule,
)
from checks.core.probe_check import (
    PROBE_EVIDENCE,
    Facts,
    Probe,
    ProbeCheck,
    ProbeParams,
    gpu_list,
    judge_max,
    load_probe,
)
from checks.gpu.xid import (
    CRITICAL,
    INFO,
    KERNEL_LOG_LABEL,
    kernel_log_command,
    normalise_pci,
    read_kernel_log,
    xid_action,
    xid_measurements,
)
from checks.gpu.xid import WARN as XID_WARN

# Reading the kernel log since the run start takes well under a second; 60 s covers a huge
# journal on a slow disk (conservative default; tune per site).
KERNEL_LOG_TIMEOUT_S = 60.0


@dataclass
class EccThresholds:
    # NVIDIA GPU memory error management docs / DCGM health checks: any volatile
    # (since last driver load) uncorrectable ECC error (XID 48) needs attention; 0 allowed.
    max_volatile_uncorrected: int | None = 0
    # None = not judged. Single-bit errors are corrected in hardware and feed row
    # remapping / page retirement, which are judged below (NVIDIA row remapping docs).
    max_volatile_corrected: int | None = None
    # None = not judged. Aggregate counts are the GPU's lifetime history across
    # reboots, including errors already repaired by row remapping; a refurbished or
    # burned-in GPU legitimately carries some. Judge the current state instead.
    max_aggregate_uncorrected: int | None = None
    # HGX/DGX data center GPUs ship with ECC enabled; disabled ECC means silent
    # memory corruption goes undetected (nvidia-smi -e; NVIDIA ECC docs).
    require_ecc_enabled: bool = True
    # NVIDIA A100/H100 row remapping docs: a pending remap takes effect only after
    # a GPU reset; until then the GPU runs on a known-bad row (contained by error
    # containment and page offlining) - reset before acceptance.
    allow_remap_pending: bool = False
    # NVIDIA row remapping docs, "RMA Policy Thresholds for Row-Remapping": a
    # remapping failure makes the GPU an RMA candidate.
    allow_remap_failure: bool = False
    # Pre-Ampere (NVIDIA Dynamic Page Retirement docs): a page pending retirement
    # is retired only after a driver reload / reboot.
    allow_retired_pages_pending: bool = False
    # NVIDIA memory error management docs: page retirement supports at most 64
    # retirements per GPU. AzureHPC health checks treat >= 62 (SBE + DBE) as a
    # full table, so fail above 61.
    max_retired_pages: int | None = 61
    # None = not judged separately; each DBE page is a contained, retired error.
    # Set to e.g. 0 for zero tolerance of double-bit retirements.
    max_retired_pages_double_bit: int | None = None
    # Waiver for GPUs that cannot report row remapping (MIG-enabled A100/H100:
    # "querying the number of remapped rows is not supported" - NVML docs).
    allow_remap_unavailable: bool = False
    # Extra Xid/SXid codes that fail on top of the catalogue's `critical` ones (checks/gpu/xid.py,
    # from NVIDIA's Xid catalog), e.g. "94,92" for a zero-tolerance site. "" = the catalogue only.
    xid_fail_codes: str = ""
    # Codes recorded but not judged, e.g. "13,31,43" where user jobs routinely fault (those are
    # application errors per NVIDIA's Xid catalog: "restart the application"). "" = judge all.
    xid_ignore_codes: str = ""

    def __post_init__(self) -> None:
        for name in ("xid_fail_codes", "xid_ignore_codes"):
            parse_codes(getattr(self, name), name)
        for name in (
            "max_volatile_uncorrected",
            "max_volatile_corrected",
            "max_aggregate_uncorrected",
            "max_retired_pages",
            "max_retired_pages_double_bit",
        ):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ParamsError(f"threshold {name!r}: must be >= 0 or None, got {value}")


def parse_codes(text: str, name: str = "codes") -> frozenset[int]:
    """'79, 48' -> {79, 48}; ParamsError naming the threshold on anything else."""
    codes = set()
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        if not part.isdigit():
            raise ParamsError(f"threshold {name!r}: expected comma-separated Xid codes like '79,48', got {text!r}")
        codes.add(int(part))
    return frozenset(codes)


# (measurement, threshold attribute, what it counts for a fail, what it is for an error)
_COUNTERS = (
    (
        "ecc_volatile_uncorrected",
        "max_volatile_uncorrected",
        "uncorrectable volatile ECC errors",
        "volatile uncorrected ECC count",
    ),
    (
        "ecc_volatile_corrected",
        "max_volatile_corrected",
        "correctable volatile ECC errors",
        "volatile corrected ECC count",
    ),
    (
        "ecc_aggregate_uncorrected",
        "max_aggregate_uncorrected",
        "uncorrectable aggregate (lifetime) ECC errors",
        "aggregate uncorrected ECC count",
    ),
)


# How the certificate names these measurements (checks/core/presentation.py measurement_labels).
ECC_LABELS = (
    ("remap_failure", "Row remap failures"),
    ("remap_pending", "Row remaps pending"),
    ("ecc_enabled", "ECC enabled"),
    ("ecc_volatile_uncorrected", "Uncorrected ECC errors (since boot)"),
    ("ecc_volatile_corrected", "Corrected ECC errors (since boot)"),
    ("ecc_aggregate_uncorrected", "Uncorrected ECC errors (lifetime)"),
    ("ecc_aggregate_corrected", "Corrected ECC errors (lifetime)"),
)


@register
class EccHealth(ProbeCheck):
    key: ClassVar[str] = "ecc_health"
    name: ClassVar[str] = "ECC and Xid"
    description: ClassVar[str] = (
        "No uncorrectable ECC errors, no pending or failed row remap, ECC enabled, no Xid since the run began."
    )
    Params: ClassVar[type] = ProbeParams
    Thresholds: ClassVar[type] = EccThresholds
    presentation: ClassVar[Presentation] = Presentation(
        measurement_labels=ECC_LABELS,
        chart="ecc",
        rank=50,
        counters=CounterTable(
            columns=(
                ("ecc_volatile_uncorrected", "volatile uncorr."),
                ("ecc_volatile_corrected", "volatile corr."),
                ("ecc_aggregate_uncorrected", "aggregate uncorr."),
                ("ecc_aggregate_corrected", "aggregate corr."),
                ("remapped_rows_uncorrectable", "remapped rows uncorr."),
                ("remapped_rows_correctable", "remapped rows corr."),
                ("remap_pending", "remap pending"),
                ("remap_failure", "remap failure"),
                ("retired_pages_single_bit", "retired pages SBE"),
                ("retired_pages_double_bit", "retired pages DBE"),
                ("retired_pages_pending", "retired pending"),
            ),
            # Kernel log events: GPU Xids and NVSwitch SXids (checks/gpu/xid.py), shown in one table.
            events=("xid", "sxid"),
        ),
        fleet=(
            FleetMetric("ecc_aggregate_uncorrected", better="lower", gpu_agg="sum"),
            FleetMetric("ecc_aggregate_corrected", better="lower", gpu_agg="sum"),
        ),
        key_metrics=(
            KeyMetric(
                "ecc_corrected", "ECC corrected errors (volatile)", "ecc_volatile_corrected", "errors",
                better="lower", per_gpu=True, gpu_agg="sum", tolerance_pct=0.0,
            ),
            KeyMetric(
                "ecc_uncorrected", "ECC uncorrected errors (volatile)", "ecc_volatile_uncorrected", "errors",
                better="lower", per_gpu=True, gpu_agg="sum", tolerance_pct=0.0,
            ),
        ),
        trends=(
            TrendRule("ecc_aggregate_corrected", +1, 1, False, "correctable ECC climbing", "errors"),
            TrendRule("ecc_volatile_corrected", +1, 1, False, "correctable ECC climbing (since boot)", "errors"),
        ),
        prometheus=tuple(
            PromMetric(f"ecc_{c}", "kiln_gpu_ecc_errors", "ECC error counters", "counter", c)
            for c in ("volatile_uncorrected", "volatile_corrected", "aggregate_uncorrected", "aggregate_corrected")
        ),
        remedies=(
            Remedy("ecc", RMA, (
                "ecc_volatile_uncorrected", "ecc_aggregate_uncorrected", "remap_failure",
                "remapped_rows_uncorrectable", "retired_pages_double_bit",
            )),
            Remedy("ecc-remap", RESET_GPU, ("remap_pending", "retired_pages_pending")),
            Remedy("ecc-mode", ENABLE_ECC, ("ecc_enabled", "ecc_pending_enabled")),
            Remedy("xid", "see the Xid catalogue", ("xid", "sxid"), action_of=xid_action),
        ),
    )  # fmt: skip
    # NVML's ECC counters, remapped rows and retired pages are counts; the mode and repair states
    # are booleans in the probe (checks/probe/SCHEMA.md). Anything else (-1, 0.5, NaN) is `error`.
    evidence: ClassVar[dict[str, Rule]] = {
        **PROBE_EVIDENCE,
        **dict.fromkeys(
            (
                "ecc_volatile_uncorrected",
                "ecc_volatile_corrected",
                "ecc_aggregate_uncorrected",
                "ecc_aggregate_corrected",
                "remapped_rows_correctable",
                "remapped_rows_uncorrectable",
                "retired_pages_single_bit",
                "retired_pages_double_bit",
            ),
            COUNT,
        ),
        **dict.fromkeys(
            ("ecc_enabled", "ecc_pending_enabled", "remap_pending", "remap_failure", "retired_pages_pending"), FLAG
        ),
        # NVIDIA Xid catalog codes are positive integers (1..159 today); SXid codes are larger.
        "xid": Rule("an Xid code", low=1, integer=True),
        "sxid": Rule("an SXid code", low=1, integer=True),
    }

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        # The same budget as the probe, capped: a check given a short budget stays short.
        log_timeout = min(KERNEL_LOG_TIMEOUT_S, float(params.timeout_s))
        return [*super().commands(params, node), kernel_log_command(node.since, log_timeout)]

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        kernel = [o for o in outputs if o.command.label == KERNEL_LOG_LABEL]
        probe_outputs = [o for o in outputs if o.command.label != KERNEL_LOG_LABEL]
        measurements = super().parse(probe_outputs)
        if not kernel:
            return measurements  # judged on the probe alone (see the module docstring)
        log = read_kernel_log(kernel[0])  # EvidenceError "kernel log unreadable: ..." -> error
        gpu_by_pci = {}
        for gpu in load_probe(probe_outputs).gpus:
            bus_id = gpu.get("pci_bus_id")
            if isinstance(bus_id, str) and bus_id:
                gpu_by_pci[normalise_pci(bus_id)] = gpu.index
        # Which reader answered (journalctl | dmesg); the window is the run's own start time.
        source = Measurement(name="kernel_log", text=log.source)
        return [*measurements, source, *xid_measurements(log.events, gpu_by_pci)]

    def measure(self, probe: Probe) -> list[Measurement]:
        out: list[Measurement] = []
        for gpu in probe.gpus:
            if not gpu.answered:
                continue  # gpu_present=0 already says it; no null counters to add
            out += [
                gpu.flag("ecc_enabled", "ecc_mode", "current"),
                gpu.flag("ecc_pending_enabled", "ecc_mode", "pending"),
                gpu.number("ecc_volatile_uncorrected", "ecc_errors", "volatile", "uncorrected"),
                gpu.number("ecc_volatile_corrected", "ecc_errors", "volatile", "corrected"),
                gpu.number("ecc_aggregate_uncorrected", "ecc_errors", "aggregate", "uncorrected"),
                gpu.number("ecc_aggregate_corrected", "ecc_errors", "aggregate", "corrected"),
                gpu.number("remapped_rows_correctable", "remapped_rows", "correctable", unit="rows"),
                gpu.number("remapped_rows_uncorrectable", "remapped_rows", "uncorrectable", unit="rows"),
                gpu.flag("remap_pending", "remapped_rows", "pending"),
                gpu.flag("remap_failure", "remapped_rows", "failure"),
            ]
            if gpu.get("retired_pages") is not None:  # pre-Ampere only; absent otherwise
                out += [
                    gpu.number("retired_pages_single_bit", "retired_pages", "single_bit", unit="pages"),
                    gpu.number("retired_pages_double_bit", "retired_pages", "double_bit", unit="pages"),
                    gpu.flag("retired_pages_pending", "retired_pages", "pending"),
                ]
        return out

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: EccThresholds = thresholds
        facts = Facts(measurements)
        xid_findings, fatal_xid = self._xids(measurements, t)
        findings = self._coverage(facts, fatal_xid)
        for i in facts.answered:
            findings += self._gpu(facts, t, i)
        findings += xid_findings
        n = len(facts.answered)
        pass_reason = f"{n} GPU{'s' if n != 1 else ''}: ECC on, no uncorrectable errors, no pending or failed repairs"
        log = next((m for m in measurements if m.name == "kernel_log"), None)
        if log is not None:
            pass_reason += f"; no Xid events in the kernel log ({log.text})"
        if not findings:
            return Verdict(status=ERROR, reason="no GPU was judged")  # unreachable: _coverage errors first
        return Verdict.from_findings(findings, pass_reason=pass_reason)

    def _xids(self, measurements: list[Measurement], t: EccThresholds) -> tuple[list[Finding], dict[int, str]]:
        """Findings for the Xid events (one per GPU/device and code), and GPU -> its critical Xid."""
        fail_codes = parse_codes(t.xid_fail_codes, "xid_fail_codes")
        ignore = parse_codes(t.xid_ignore_codes, "xid_ignore_codes")
        groups: dict[tuple[str, str, int, str], list[Measurement]] = {}
        fatal: dict[int, str] = {}
        for m in measurements:
            if m.name not in ("xid", "sxid") or m.value is None:
                continue
            code = int(m.value)
            severity = m.labels.get("severity", XID_WARN)
            if code in ignore:
                m.threshold = "ignored (xid_ignore_codes)"
                continue
            if code in fail_codes or severity == CRITICAL:
                status = FAIL
            elif severity == INFO:
                m.threshold, m.ok = "info only", True
                continue
            else:
                status = WARN
            m.threshold, m.ok = "no fail/warn Xid", False
            kind = m.labels.get("kind", "xid")
            if m.gpu is not None:
                who = f"GPU {m.gpu}"
            elif kind == "sxid":
                who = f"NVSwitch {m.labels.get('pci', '?')}"
            else:
                who = f"PCI {m.labels.get('pci', '?')}"
            groups.setdefault((status, who, code, kind), []).append(m)
            if status == FAIL and m.gpu is not None:
                fatal.setdefault(m.gpu, f"Xid {code}")
        findings = []
        for (status, who, code, kind), events in groups.items():
            label = "SXid" if kind == "sxid" else "Xid"
            meaning = events[0].labels.get("meaning", "")
            first = events[0].labels.get("time") or "an unknown time"
            when = f"at {first}" if len(events) == 1 else f"x{len(events)}, first at {first}"
            findings.append(Finding(status, f"{who}: {label} {code} ({meaning}) {when}"))
        order = {FAIL: 0, WARN: 1}
        findings.sort(key=lambda f: order.get(f.status, 2))
        return findings, fatal

    def _coverage(self, facts: Facts, fatal_xid: dict[int, str] | None = None) -> list[Finding]:
        findings: list[Finding] = []
        count = facts.value("gpu_count")
        if count is None:
            why = facts.missing("gpu_count")
            findings.append(Finding(ERROR, f"GPU count unavailable ({why}); cannot tell every GPU was checked"))
        if not facts.listed:
            extra = f" ({'; '.join(facts.probe_errors[:2])})" if facts.probe_errors else ""
            findings.append(Finding(ERROR, f"probe listed no GPUs{extra}"))
            return findings
        unlisted = facts.unlisted() or []
        if unlisted:
            findings.append(
                Finding(
                    ERROR,
                    f"{gpu_list(unlisted)}: no ECC data (driver reports {int(count or 0)} GPUs, "
                    f"probe listed {len(facts.listed)})",
                )
            )
        for i, why in facts.silent.items():
            if fatal_xid and i in fatal_xid:
                # The kernel log says why it stopped answering: that is a verdict, not a blind spot.
                findings.append(Finding(FAIL, f"GPU {i}: not responding after {fatal_xid[i]} ({why})"))
            else:
                findings.append(Finding(ERROR, f"GPU {i}: no ECC data (GPU not responding: {why})"))
        return findings

    def _gpu(self, facts: Facts, t: EccThresholds, i: int) -> list[Finding]:
        findings: list[Finding] = []
        enabled = facts.get("ecc_enabled", i)
        pending = facts.get("ecc_pending_enabled", i)
        if enabled.value is None:
            findings.append(Finding(ERROR, f"GPU {i}: ECC mode unavailable ({facts.missing('ecc_enabled', i)})"))
            return findings
        if t.require_ecc_enabled:
            enabled.threshold, enabled.ok = "== 1", enabled.value == 1
        if enabled.value == 0:
            if t.require_ecc_enabled:
                after = " (enabled after the next reset)" if pending.value == 1 else ""
                findings.append(Finding(FAIL, f"GPU {i}: ECC mode disabled{after}"))
            else:
                findings.append(Finding(PASS, f"GPU {i}: ECC disabled (allowed)"))
            # Counters are N/A with ECC off; only a reported repair problem is still worth saying.
            findings += self._remap(facts, t, i, require=False)
            return findings
        if pending.value == 0 and t.require_ecc_enabled:
            findings.append(Finding(WARN, f"GPU {i}: ECC will be disabled at the next reset (pending mode off)"))

        for name, attr, what, label in _COUNTERS:
            limit = getattr(t, attr)
            m = facts.get(name, i)
            if limit is None:
                continue  # recorded, not judged
            if m.value is None:
                findings.append(Finding(ERROR, f"GPU {i}: {label} unavailable ({facts.missing(name, i)})"))
                continue
            bad = judge_max(m, limit, f"GPU {i}: {int(m.value)} {what} (max {limit})")
            if bad:
                findings.append(bad)
        findings += self._remap(facts, t, i, require=True)
        if not findings:
            findings.append(Finding(PASS, f"GPU {i}: ECC healthy"))
        return findings

    def _remap(self, facts: Facts, t: EccThresholds, i: int, *, require: bool) -> list[Finding]:
        findings: list[Finding] = []
        remap_flags = [facts.get("remap_pending", i), facts.get("remap_failure", i)]
        retired = facts.by_key.get(("retired_pages_pending", i))
        if any(m.value is not None for m in remap_flags) or facts.value("remapped_rows_uncorrectable", i) is not None:
            pending, failure = remap_flags
            for m, allowed, bad_reason, label in (
                (
                    pending,
                    t.allow_remap_pending,
                    f"GPU {i}: row remap pending (reset the GPU)",
                    "row remap pending flag",
                ),
                (
                    failure,
                    t.allow_remap_failure,
                    f"GPU {i}: row remapping failed (RMA candidate)",
                    "row remap failure flag",
                ),
            ):
                if m.value is None:
                    if require:
                        findings.append(Finding(ERROR, f"GPU {i}: {label} unavailable ({facts.missing(m.name, i)})"))
                    continue
                if not allowed:
                    m.threshold, m.ok = "== 0", m.value == 0
                    if m.value:
                        findings.append(Finding(FAIL, bad_reason))
            return findings
        if retired is not None:
            return self._retired(facts, t, i, require=require)
        if require and not t.allow_remap_unavailable:
            why = facts.missing("remap_pending", i)
            findings.append(
                Finding(ERROR, f"GPU {i}: row remapping state unavailable ({why}) and no page retirement data")
            )
        return findings

    def _retired(self, facts: Facts, t: EccThresholds, i: int, *, require: bool) -> list[Finding]:
        findings: list[Finding] = []
        pending = facts.get("retired_pages_pending", i)
        sbe = facts.get("retired_pages_single_bit", i)
        dbe = facts.get("retired_pages_double_bit", i)
        if pending.value is None:
            if require:
                why = facts.missing("retired_pages_pending", i)
                findings.append(Finding(ERROR, f"GPU {i}: retired pages pending flag unavailable ({why})"))
        elif not t.allow_retired_pages_pending:
            pending.threshold, pending.ok = "== 0", pending.value == 0
            if pending.value:
                findings.append(Finding(FAIL, f"GPU {i}: retired pages pending (reboot or reset the GPU)"))
        if t.max_retired_pages is not None:
            if sbe.value is None or dbe.value is None:
                if require:
                    findings.append(Finding(ERROR, f"GPU {i}: retired page counts unavailable"))
            elif sbe.value + dbe.value > t.max_retired_pages:
                total = int(sbe.value + dbe.value)
                findings.append(Finding(FAIL, f"GPU {i}: {total} retired pages (max {t.max_retired_pages})"))
        if t.max_retired_pages_double_bit is not None:
            if dbe.value is None:
                if require:
                    findings.append(Finding(ERROR, f"GPU {i}: double-bit retired page count unavailable"))
            else:
                limit = t.max_retired_pages_double_bit
                bad = judge_max(dbe, limit, f"GPU {i}: {int(dbe.value)} double-bit retired pages (max {limit})")
                if bad:
                    findings.append(bad)
        return findings
