"""slurm_container: the node runs the site's container workload path, Slurm + pyxis + enroot.

For clusters whose scheduler is Slurm. Two commands on the node:

1. `nvidia-smi --query-gpu=index,uuid,driver_version --format=csv,noheader`: what the node sees
   outside any container (read-only);
2. `srun --nodes=1 --ntasks=1 --nodelist=<node> --exclusive --gpus-per-node=<gpus>
   --container-image=<site image> sh -c <script>`: one job step inside the image that prints the
   same nvidia-smi table, then runs a short nccl-tests sweep (`all_reduce_perf -b 8M -e 64M -f 2
   -g <gpus> -c 1`), each in a section closed by its exit status. One step, so the image is
   pulled once, not once per test.

The image is a site param (`image`): an enroot URI (`nvcr.io#nvidia/pytorch:24.05-py3`) or a
squashfs path, validated strictly (checks/software/slurm_container_read.check_image) and passed as one argv
element. The Slurm node name is the node's hostname, as the scheduler hooks use it
(portal/health/hooks.py), unless the cluster's check settings map it:
`{"slurm_node_names": {"gpu001.example.org": "gpu001"}}`; it is validated like any node list entry.

Pass only when, inside the container: the GPU count is the node's expected count (else the
count the node sees outside), every UUID is one the node sees outside, the driver is the host's,
and (param `nccl_test`) nccl-tests printed a complete table (its closing summary, and a row for
every size of the sweep) with busbw above 0 and #wrong within `max_wrong`. Bandwidth floors are
nccl_allreduce's business, not this check's.

Verdicts:
- `fail`: the GPUs, UUIDs or driver in the container differ from the host's, NCCL found wrong
  results or moved nothing, pyxis is not loaded in srun, the container could not start, or the
  image could not be pulled (the quoted pyxis/enroot line says why). A pull refused for a reason
  the site controls (bad credentials, an image or tag that does not exist, no space for the
  squashfs, an unwritable runtime directory: HTTP 4xx, enroot's local errors) is `fail`: the node,
  as the site configured it, cannot run the workload, and an acceptance must not pass it.
- `error`: nothing could be told about the node. srun could not run at all (no Slurm client, the
  node not in the partition, the controller unreachable, the node busy past `allocation_wait_s`),
  the cluster's scheduler is not Slurm, no image is set, output missing or cut short, nvidia-smi
  or the NCCL program absent from the image, a truncated or crashed NCCL run. A registry outage
  (HTTP 5xx or 429, DNS or connection failures, curl(1) exit codes 6/7/28/35/52/56) is also
  `error`: the node was never exercised, and `fail` would mark every node of the cluster failed
  (and drain them where scheduler hooks are on) for a shared service being down; the reason still
  quotes enroot's line, so the operator sees the registry at fault.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core import evidence
from checks.core.base import (
    ERROR,
    FAIL,
    WARN,
    Check,
    Command,
    CommandOutput,
    EvidenceError,
    Finding,
    Measurement,
    NodeContext,
    ParamsError,
    Verdict,
    register,
)
from checks.core.presentation import Presentation
from checks.nccl.allreduce import _check_hostname
from checks.nccl.measure import measurements_from, report_problems
from checks.nccl.nccl_tests import (
    ALGBW_RULE,
    NcclReport,
    collective_name,
    format_size,
    launcher_error,
    parse_report,
    parse_size,
)
from checks.software.slurm_container_read import (
    QUERY_FIELDS,
    check_image,
    check_program,
    check_slurm_name,
    gpu_measurements,
    parse_gpu_csv,
    read_sections,
    step_problem,
)

HOST_LABEL = "nvidia-smi (host)"
STEP_LABEL = "srun --container-image"
REFUSED_LABEL = "slurm-container refused"
# Inside the container: $1 GPUs, $2 the nccl-tests program, $3/$4 its sizes, $5 "1" to run it.
# Fixed text; every value is an argument, never part of the script.
CONTAINER_SCRIPT = r"""printf '@@kiln-section gpus\n'
nvidia-smi --query-gpu=index,uuid,driver_version --format=csv,noheader; printf '\n@@kiln-rc %s\n' "$?"
if [ "$5" = 1 ]; then
printf '@@kiln-section nccl\n'; "$2" -b "$3" -e "$4" -f 2 -g "$1" -c 1; printf '\n@@kiln-rc %s\n' "$?"
fi
"""
# Writes the reason to stderr and exits 64 (EX_USAGE): what a refused node's result shows.
REFUSED_SCRIPT = 'printf "%s\\n" "$1" >&2; exit 64'
# nvidia-smi lists 8 GPUs in about a second; a wedged driver is what the 60 s bound catches
# (the probe's own budget, checks/core/probe_check.ProbeParams).
HOST_TIMEOUT_S = 60.0


@dataclass
class SlurmContainerParams:
    # The site's image: an enroot URI (nvcr.io#nvidia/pytorch:24.05-py3) or a squashfs path on the
    # node. "" = not set: the check errors without running srun.
    image: str = ""
    partition: str = ""  # "" = the cluster's default partition
    account: str = ""  # "" = the SSH user's default Slurm account
    reservation: str = ""  # "" = no reservation (an acceptance often runs in one: name it)
    # Ask for the node's GPUs through GRES (--gpus-per-node): without it a cgroup-constrained
    # step sees no GPU. Off for sites that give whole nodes without GPU GRES.
    request_gpus: bool = True
    # GPUs to request and test; None: the node's expected count, else 8 (HGX/DGX baseboards).
    gpus: int | None = None
    nccl_test: bool = True
    # The nccl-tests program inside the image: a name on the image's PATH, or a path in it.
    nccl_binary: str = "all_reduce_perf"
    # A short sweep (the example, 8 MiB .. 64 MiB by x2): proof that NCCL runs inside the
    # container over the node's GPUs; bandwidth floors belong to nccl_allreduce.
    min_bytes: str = "8M"
    max_bytes: str = "64M"
    # srun --immediate: how long to wait for the node to be allocated before giving up (a busy or
    # drained node is `error`, not a hung check). Conservative default; tune per site.
    allocation_wait_s: int = 120
    # The step: allocation, pulling a multi-GB NGC image over the site's link (minutes on 1-10 Gb/s),
    # enroot create, then seconds of NCCL. Conservative default; tune per site (a cached squashfs
    # takes well under a minute).
    timeout_s: int = 900

    def __post_init__(self) -> None:
        if self.image:
            check_image(self.image)
        check_program("nccl_binary", self.nccl_binary)
        for name in ("partition", "account", "reservation"):
            check_slurm_name(name, getattr(self, name))
        for name in ("min_bytes", "max_bytes"):
            try:
                parse_size(getattr(self, name))
            except ValueError as exc:
                raise ParamsError(f"param {name!r}: {exc}") from None
        if parse_size(self.min_bytes) > parse_size(self.max_bytes):
            raise ParamsError(f"param 'min_bytes' ({self.min_bytes}) is above 'max_bytes' ({self.max_bytes})")
        if self.gpus is not None and self.gpus < 1:
            raise ParamsError(f"param 'gpus': must be >= 1, got {self.gpus}")
        if self.allocation_wait_s < 1 or self.timeout_s < 60:
            raise ParamsError("params 'allocation_wait_s' >= 1 and 'timeout_s' >= 60 seconds")


@dataclass
class SlurmContainerThresholds:
    # nccl-tests compares every result with a reference (-c 1): any wrong element is a broken
    # collective (bad NVLink, memory corruption, a broken container NCCL), never a tuning matter.
    max_wrong: int = 0

    def __post_init__(self) -> None:
        if self.max_wrong < 0:
            raise ParamsError(f"threshold 'max_wrong': must be >= 0, got {self.max_wrong}")


def slurm_node_name(node: NodeContext) -> str:
    """The node's Slurm NodeName: the cluster's `slurm_node_names` mapping, else its hostname."""
    names = node.settings.get("slurm_node_names") if isinstance(node.settings, dict) else None
    mapped = names.get(node.hostname) if isinstance(names, dict) else None
    return mapped if isinstance(mapped, str) and mapped else node.hostname


def refusal(params: SlurmContainerParams, node: NodeContext) -> str:
    """Why srun must not run on this node ('' when it may)."""
    if node.scheduler and node.scheduler != "slurm":
        return f"the cluster's scheduler is {node.scheduler!r}, not Slurm: the Slurm container path does not apply"
    if not params.image:
        return (
            "no container image set: param 'image' (an enroot URI such as nvcr.io#nvidia/pytorch:24.05-py3, "
            "or a squashfs path)"
        )
    try:
        _check_hostname(slurm_node_name(node))
    except ParamsError as exc:
        return str(exc)
    return ""


def srun_argv(p: SlurmContainerParams, node: NodeContext) -> tuple[str, ...]:
    gpus = p.gpus or node.expected_gpus or 8
    minutes = math.ceil(p.timeout_s / 60) + 1  # Slurm's own bound on the job, past Kiln's
    argv = [
        "srun", "--nodes=1", "--ntasks=1", f"--nodelist={slurm_node_name(node)}", "--exclusive",
        f"--immediate={p.allocation_wait_s}", f"--time={minutes}", "--job-name=kiln-slurm-container",
    ]  # fmt: skip
    if p.request_gpus:
        argv.append(f"--gpus-per-node={gpus}")
    argv += [f"--{name}={getattr(p, name)}" for name in ("partition", "account", "reservation") if getattr(p, name)]
    argv.append(f"--container-image={p.image}")
    nccl = "1" if p.nccl_test else "0"
    argv += ["sh", "-c", CONTAINER_SCRIPT, "kiln-container", str(gpus), p.nccl_binary, p.min_bytes, p.max_bytes, nccl]
    return tuple(argv)


@register
class SlurmContainer(Check):
    key: ClassVar[str] = "slurm_container"
    name: ClassVar[str] = "Slurm container path"
    description: ClassVar[str] = (
        "srun with the site's pyxis/enroot image (param image): every GPU, its UUID and the host's driver"
        " inside the container, and a short NCCL run there."
    )
    # The site's image has no default; the simulated srun runs any image (testbed/sim/tools/srun).
    simulator_params: ClassVar[dict[str, Any]] = {"image": "nvcr.io#nvidia/pytorch:24.05-py3"}
    Params: ClassVar[type] = SlurmContainerParams
    Thresholds: ClassVar[type] = SlurmContainerThresholds
    presentation: ClassVar[Presentation] = Presentation(rank=66)
    # srun returns the step's status (pyxis failures exit 1, srun's own 1 or 2, a missing srun
    # 127): parse reads every one of them, so no exit code is an error by itself.
    ok_exit_codes: ClassVar[tuple[int, ...]] = tuple(range(256))
    evidence: ClassVar[dict[str, evidence.Rule]] = {
        "host_gpus": evidence.COUNT,
        "container_gpus": evidence.COUNT,
        "wrong": evidence.COUNT,
        "ranks": evidence.COUNT,
        "nodes": evidence.COUNT,
        "algbw_peak": ALGBW_RULE,
    }

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        p: SlurmContainerParams = params
        why = refusal(p, node)
        if why:
            argv = ("sh", "-c", REFUSED_SCRIPT, "kiln-refused", why)
            return [Command(argv=argv, timeout=10.0, label=REFUSED_LABEL, read_only=True)]
        host = Command(
            argv=("nvidia-smi", f"--query-gpu={QUERY_FIELDS}", "--format=csv,noheader"),
            timeout=HOST_TIMEOUT_S,
            label=HOST_LABEL,
            read_only=True,
        )
        return [host, Command(argv=srun_argv(p, node), timeout=float(p.timeout_s), label=STEP_LABEL)]

    def timeout(self, params: Any) -> float:
        return HOST_TIMEOUT_S + float(params.timeout_s)

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        refused = [o for o in outputs if o.command.label == REFUSED_LABEL]
        if refused:
            raise EvidenceError(refused[0].command.argv[-1])
        host, step = _output(outputs, HOST_LABEL), _output(outputs, STEP_LABEL)
        if host.exit_code != 0:
            raise EvidenceError(f"nvidia-smi on the host exited {host.exit_code}: {self.describe_failure(host)}")
        out = gpu_measurements(parse_gpu_csv(host.stdout), "host")
        out.append(Measurement(name="container_image", text=_image_of(step.command.argv)))
        problem = step_problem(step.stdout, step.stderr, step.exit_code or 0)
        if problem is not None and problem.status == ERROR:
            raise EvidenceError(problem.reason)
        if problem is not None:
            labels = {"kind": problem.kind, "reason": problem.reason}
            return [*out, Measurement(name="container_start", text="failed", labels=labels)]
        nccl = step.command.argv[-1] == "1"
        sections = read_sections(step.stdout, ("gpus", "nccl") if nccl else ("gpus",))
        if step.exit_code != 0:
            raise EvidenceError(f"srun exited {step.exit_code}: {self.describe_failure(step)}")
        out += _container_gpus(sections["gpus"], step.stderr)
        if nccl:
            try:
                out += _nccl(sections["nccl"], step)
            except EvidenceError as exc:  # judged in evaluate: `error`, unless the GPUs already fail
                out.append(Measurement(name="nccl_error", text=str(exc)))
        return out

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: SlurmContainerThresholds = thresholds
        where = _where(node)
        start = next((m for m in measurements if m.name == "container_start"), None)
        if start is not None:
            return Verdict.from_findings([Finding(FAIL, f"{where}: {start.labels.get('reason', 'container failed')}")])
        by_name = {m.name: m for m in measurements if m.gpu is None}
        findings = _gpu_findings(measurements, by_name, node, where)
        findings += _driver_findings(by_name, where)
        broken = by_name.get("nccl_error")
        if broken is not None:
            # NCCL could not be judged (crashed, cut short, absent from the image): `error`, but a
            # container already short of GPUs or on another driver fails, whatever NCCL then did.
            failed = any(f.status == FAIL for f in findings)
            findings.append(Finding(WARN if failed else ERROR, f"{where}: {broken.text}"))
        else:
            findings += _nccl_findings(by_name, t, where)
        return Verdict.from_findings(findings, pass_reason=_pass_reason(by_name, where))


def _output(outputs: list[CommandOutput], label: str) -> CommandOutput:
    found = [o for o in outputs if o.command.label == label]
    if not found:
        raise EvidenceError(f"no {label} output to judge")
    return found[0]


def _image_of(argv: tuple[str, ...]) -> str:
    prefix = "--container-image="
    return next((a[len(prefix) :] for a in argv if a.startswith(prefix)), "")


def _where(node: NodeContext) -> str:
    slurm = slurm_node_name(node)
    return node.hostname if slurm == node.hostname else f"{node.hostname} (Slurm node {slurm})"


def _container_gpus(section: tuple[str, int | None], stderr: str) -> list[Measurement]:
    """The container's GPU table. nvidia-smi absent is `error` (nothing was seen); NVML failing
    inside (driver/library mismatch, no device nodes: nvidia-smi exits 9) is zero GPUs seen."""
    text, rc = section
    if rc == 127:
        raise EvidenceError(
            "nvidia-smi not found inside the container (neither the image nor enroot's NVIDIA hook "
            "provides it): the container's GPUs cannot be listed"
        )
    if rc in (0, 6):
        return gpu_measurements(parse_gpu_csv(text), "container")
    said = [x.strip() for x in (text + "\n" + stderr).splitlines() if "NVML" in x or "driver" in x.lower()]
    if rc == 9 or said:
        out = gpu_measurements([], "container")
        out[0].labels["why"] = (said[0] if said else f"nvidia-smi exited {rc}")[:200]
        return out
    raise EvidenceError(f"nvidia-smi inside the container exited {rc}: {(text.strip() or stderr.strip())[-200:]}")


def _nccl(section: tuple[str, int | None], step: CommandOutput) -> list[Measurement]:
    """nccl-tests inside the container, held to checks/nccl/allreduce.py's rules: complete, no crash,
    every cell possible; exit 1 only for a complete run whose footer says FAILED."""
    text, rc = section
    binary = step.command.argv[-4]
    if rc == 127:
        raise EvidenceError(f"{binary} not found inside the container image: the NCCL step could not run")
    try:
        report = parse_report(text)
    except EvidenceError as exc:
        why = launcher_error(text + "\n" + step.stderr)
        raise EvidenceError(f"NCCL inside the container (exit {rc}): {why or exc}") from None
    if report.failures:
        raise EvidenceError(f"NCCL inside the container crashed: {report.failures[0][:300]}")
    if rc != 0 and not (report.complete and report.out_of_bounds_failed):
        raise EvidenceError(
            f"NCCL inside the container exited {rc}: {launcher_error(text + step.stderr) or 'no reason'}"
        )
    report_problems(report)  # no closing summary -> "output incomplete"; impossible cells -> error
    missing = missing_sizes(report, parse_size(step.command.argv[-3]), parse_size(step.command.argv[-2]))
    if missing:
        # busbw is judged over every size swept: a row gone (cut, garbled) would move the peak.
        raise EvidenceError(f"NCCL inside the container: no result row for {', '.join(missing)}")
    return measurements_from(report, peak_min_bytes=0, collective=collective_name(binary))


# nccl-tests rounds a size down to a whole number of elements per rank (src/common.cu: count /
# nranks * nranks): under 1 KiB for any rank count up to 64 with 16-byte elements.
SIZE_ROUNDING_B = 1024


def missing_sizes(report: NcclReport, low: int, high: int) -> list[str]:
    """The sizes of the -b low -e high -f 2 sweep that have no row in the table."""
    sizes, missing, size = [r.size for r in report.rows], [], low
    while size <= high:
        if not any(size - SIZE_ROUNDING_B <= r <= size for r in sizes):
            missing.append(format_size(size))
        size = size * 2 if size else 1
    return missing


def _gpu_findings(
    measurements: list[Measurement], by_name: dict[str, Measurement], node: NodeContext, where: str
) -> list[Finding]:
    findings: list[Finding] = []
    host = {m.gpu: m.text for m in measurements if m.name == "host_gpu_uuid"}
    inside = {m.gpu: m.text for m in measurements if m.name == "container_gpu_uuid"}
    count = by_name["container_gpus"]
    expected = node.expected_gpus if node.expected_gpus is not None else len(host)
    assert count.value is not None  # gpu_measurements always counts
    count.threshold, count.ok = f"== {expected}", int(count.value) == expected
    if not count.ok:
        why = f" ({count.labels['why']})" if count.labels.get("why") else ""
        missing = sorted(set(host.values()) - set(inside.values()))
        names = f"; not visible: {', '.join(missing[:8])}" if missing else ""
        findings.append(Finding(FAIL, f"{where}: the container sees {int(count.value)} of {expected} GPUs{why}{names}"))
    strangers = sorted(set(inside.values()) - set(host.values()))
    if strangers:
        findings.append(
            Finding(
                FAIL, f"{where}: GPU {', '.join(strangers[:4])} in the container is not one the node lists outside it"
            )
        )
    return findings


def _driver_findings(by_name: dict[str, Measurement], where: str) -> list[Finding]:
    host, inside = by_name["host_driver"], by_name["container_driver"]
    if not host.text:
        return [Finding(ERROR, f"{where}: the host's driver version is unknown ({host.labels.get('missing', '')})")]
    if not inside.text:
        return []  # no GPU inside: already a failure of the count
    inside.threshold, inside.ok = f"== {host.text}", inside.text == host.text
    if inside.ok:
        return []
    return [Finding(FAIL, f"{where}: driver {inside.text} inside the container, {host.text} on the host")]


def _nccl_findings(by_name: dict[str, Measurement], t: SlurmContainerThresholds, where: str) -> list[Finding]:
    busbw = by_name.get("busbw_peak")
    if busbw is None:
        return []  # nccl_test off
    findings: list[Finding] = []
    wrong = by_name.get("wrong")
    if wrong is None or wrong.value is None:
        why = wrong.labels.get("missing", "no #wrong column") if wrong else "no #wrong column"
        findings.append(Finding(ERROR, f"{where}: NCCL results not validated inside the container: {why}"))
    else:
        wrong.threshold, wrong.ok = f"<= {t.max_wrong}", wrong.value <= t.max_wrong
        if not wrong.ok:
            findings.append(Finding(FAIL, f"{where}: NCCL inside the container: #wrong = {int(wrong.value)}"))
    ranks, gpus = by_name.get("ranks"), by_name["container_gpus"]
    if ranks is None or ranks.value is None:
        findings.append(Finding(ERROR, f"{where}: no '# Rank ... device' lines: cannot tell which GPUs NCCL used"))
    elif gpus.value and int(ranks.value) != int(gpus.value):
        findings.append(
            Finding(ERROR, f"{where}: NCCL ran on {int(ranks.value)} GPUs, the container sees {int(gpus.value)}")
        )
    if busbw.value is None:
        findings.append(Finding(ERROR, f"{where}: {busbw.labels.get('missing', 'no busbw')}"))
        return findings
    busbw.threshold, busbw.ok = "> 0", busbw.value > 0
    if not busbw.ok:
        findings.append(Finding(FAIL, f"{where}: NCCL inside the container moved nothing (busbw 0)"))
    return findings


def _pass_reason(by_name: dict[str, Measurement], where: str) -> str:
    gpus, driver, image = by_name["container_gpus"], by_name["container_driver"], by_name["container_image"]
    text = f"{where}: {int(gpus.value or 0)} GPUs and driver {driver.text} as on the host, inside {image.text}"
    busbw, wrong = by_name.get("busbw_peak"), by_name.get("wrong")
    if busbw is not None and busbw.value is not None and wrong is not None and wrong.value is not None:
        size = int(float(busbw.labels.get("size", "0")))
        text += f"; NCCL busbw {busbw.value:.1f} GB/s at {size >> 20} MiB, #wrong {int(wrong.value)}"
    return text
