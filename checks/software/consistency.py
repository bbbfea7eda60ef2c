"""sw_consistency: the software and firmware a node runs, and whether it matches its peers.

Evidence: the probe JSON (driver, CUDA, VBIOS per GPU) and one fixed `sh -c` script (no input is
interpolated; the os-release path is passed as $1) printing three sections: `uname -r`, the
os-release file (param `os_release_path`, default /etc/os-release), and `ibstat` for the NIC
firmware per CA (skipped, and said so, when ibstat is not installed).

A second fixed script reads the cluster software stack (checks/software/stack.py): NCCL as the
loader resolves it, the RDMA stack (`ofed_info -s`: MLNX_OFED or DOCA-OFED), UCX (`ucx_info -v`),
Enroot, Slurm (`srun --version`) and Pyxis (loaded in srun, and its package version).

Measurements (text): driver_version, cuda_version, vbios (per GPU), kernel, os (PRETTY_NAME,
labels id / version_id), nic_firmware (per CA, labels ca, ca_type), nccl_lib_version,
ofed_version, ucx_version, enroot_version, slurm_version, pyxis_version.

A node on its own passes with its facts (or fails a pinned `expected_*` value; "" = not pinned).
Missing facts (kernel, OS, driver, a GPU's VBIOS) are `error`. What matters most is agreement:
`consensus(per_node)` names the odd node out per fact when a strict majority of the nodes that
report it agree ("kernel 6.5.0-1 differs from 11 of 12 nodes (6.8.0-45)"); VBIOS and NIC firmware
are compared as the set of versions on the node. The stack components compare their version or
"not installed" ("Enroot 3.4.0 differs from 3 of 4 nodes (3.4.1)"); each may be pinned
(`expected_nccl`, `expected_ofed`, ...). No majority: nothing is flagged.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    Command,
    CommandOutput,
    EvidenceError,
    Finding,
    Measurement,
    NodeContext,
    Verdict,
    register,
)
from checks.core.presentation import REINSTALL_DRIVER, Presentation, Remedy
from checks.core.probe_check import Facts, Probe, ProbeCheck
from checks.rdma.infiniband import parse_ibstat_text
from checks.software.stack import COMPONENTS as STACK_COMPONENTS
from checks.software.stack import SECTIONS as STACK_SECTIONS
from checks.software.stack import (
    STACK_LABEL,
    STACK_NAMES,
    STACK_SCRIPT,
    STACK_TIMEOUT_S,
    stack_findings,
    stack_measurements,
    stack_summary,
)

FACTS_LABEL = "kernel, os-release, ibstat"
# Each section: a header, the tool's output, a blank line, then its exit status.
FACTS_SCRIPT = r"""printf '@@kiln-section kernel\n'; uname -r; printf '\n@@kiln-rc %s\n' "$?"
printf '@@kiln-section os_release\n'; cat -- "$1"; printf '\n@@kiln-rc %s\n' "$?"
printf '@@kiln-section ibstat\n'
if command -v ibstat >/dev/null 2>&1; then ibstat; printf '\n@@kiln-rc %s\n' "$?"
else echo 'ibstat: command not found' >&2; printf '@@kiln-rc 127\n'; fi
"""
SECTIONS = ("kernel", "os_release", "ibstat")
# uname, cat and ibstat answer in well under a second (conservative default; tune per site).
FACTS_TIMEOUT_S = 30.0


@dataclass
class SoftwareParams:
    timeout_s: int = 60  # the probe's budget (see checks/core/probe_check.ProbeParams)
    # The os-release file to read; a site with a custom image description may point elsewhere.
    os_release_path: str = "/etc/os-release"


@dataclass
class SoftwareThresholds:
    # Pinned values; "" = not pinned (only cross-node consensus applies).
    expected_kernel: str = ""
    expected_os: str = ""  # PRETTY_NAME, e.g. "Ubuntu 22.04.4 LTS"
    expected_vbios: str = ""  # every GPU's VBIOS
    expected_nic_firmware: str = ""  # every compute CA's firmware (ibstat "Firmware version")
    # The cluster software stack (checks/software/stack.py): the full text or its version part,
    # e.g. expected_ofed "23.10-1.1.9.0" or "MLNX_OFED_LINUX-23.10-1.1.9.0", expected_pyxis "0.20.0-1".
    expected_nccl: str = ""
    expected_ofed: str = ""
    expected_ucx: str = ""
    expected_enroot: str = ""
    expected_pyxis: str = ""
    expected_slurm: str = ""


def split_sections(text: str) -> dict[str, tuple[str, int | None]]:
    """The script's stdout -> section name -> (text, exit status or None when cut short)."""
    sections: dict[str, tuple[str, int | None]] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("@@kiln-section "):
            if name is not None:
                sections[name] = ("\n".join(lines), None)
            name, lines = line.split(None, 1)[1].strip(), []
        elif line.startswith("@@kiln-rc ") and name is not None:
            rc = line.split(None, 1)[1].strip()
            sections[name] = ("\n".join(lines), int(rc) if rc.lstrip("-").isdigit() else None)
            name, lines = None, []
        elif name is not None:
            lines.append(line)
    if name is not None:
        sections[name] = ("\n".join(lines), None)
    return sections


def parse_os_release(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip().strip('"').strip("'")
    return values


@register
class SoftwareConsistency(ProbeCheck):
    key: ClassVar[str] = "sw_consistency"
    name: ClassVar[str] = "Software and firmware"
    description: ClassVar[str] = "Driver, CUDA, VBIOS, kernel, OS and NIC firmware; the odd node out is flagged."
    Params: ClassVar[type] = SoftwareParams
    Thresholds: ClassVar[type] = SoftwareThresholds
    # The odd node out is judged against its peers (no per-measurement threshold): one remedy.
    presentation: ClassVar[Presentation] = Presentation(remedies=(Remedy("software", REINSTALL_DRIVER),))

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        facts = Command(
            argv=("sh", "-c", FACTS_SCRIPT, "sh", params.os_release_path),
            timeout=FACTS_TIMEOUT_S,
            label=FACTS_LABEL,
            read_only=True,  # uname, cat, ibstat
        )
        stack = Command(
            argv=("sh", "-c", STACK_SCRIPT, "sh"),
            timeout=STACK_TIMEOUT_S,
            label=STACK_LABEL,
            # ldconfig -p, readlink, ofed_info -s, ucx_info -v, enroot version, srun --version and
            # --help, dpkg-query -W / rpm -q: all read-only.
            read_only=True,
        )
        return [*super().commands(params, node), facts, stack]

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        probe_outputs = [o for o in outputs if o.command.label not in (FACTS_LABEL, STACK_LABEL)]
        script = [o for o in outputs if o.command.label == FACTS_LABEL]
        stack = [o for o in outputs if o.command.label == STACK_LABEL]
        measurements = super().parse(probe_outputs)
        if not script:
            raise EvidenceError("no kernel / os-release output to judge")
        if not stack:
            raise EvidenceError(f"no {STACK_LABEL} output to judge")
        sections = split_sections(script[0].stdout)
        # FACTS_SCRIPT closes every section with "@@kiln-rc N": one missing or unclosed means
        # the output was cut short, and a fact read from half a section is no evidence.
        cut = [name for name in SECTIONS if sections.get(name, ("", None))[1] is None]
        if cut:
            raise EvidenceError(
                f"{FACTS_LABEL} output incomplete: section {', '.join(cut)} cut short (no '@@kiln-rc' line)"
            )
        errors = [s.strip() for s in script[0].stderr.splitlines() if s.strip()]
        return measurements + self._host_facts(sections, errors) + _stack(stack[0])

    def _host_facts(self, sections: dict[str, tuple[str, int | None]], errors: list[str]) -> list[Measurement]:
        def why(tool: str, rc: int | None) -> str:
            said = [e for e in errors if tool in e] or errors
            status = "cut short" if rc is None else f"exited {rc}"
            return f"{tool} {status}" + (f": {said[-1][:200]}" if said else "")

        out: list[Measurement] = []
        text, rc = sections.get("kernel", ("", None))
        kernel = text.strip().splitlines()[0].strip() if text.strip() else ""
        out.append(Measurement(name="kernel", text=kernel if rc == 0 else ""))
        if rc != 0 or not kernel:
            out[-1].labels["missing"] = why("uname", rc)
        text, rc = sections.get("os_release", ("", None))
        values = parse_os_release(text) if rc == 0 else {}
        pretty = values.get("PRETTY_NAME") or " ".join(filter(None, [values.get("NAME"), values.get("VERSION")]))
        os_m = Measurement(
            name="os", text=pretty, labels={"id": values.get("ID", ""), "version_id": values.get("VERSION_ID", "")}
        )
        if not pretty:
            os_m.labels["missing"] = why("cat", rc) if rc != 0 else "os-release has no PRETTY_NAME or NAME"
        out.append(os_m)
        text, rc = sections.get("ibstat", ("", None))
        if rc == 127:
            out.append(Measurement(name="nic_firmware", text="", labels={"missing": "ibstat not installed"}))
            return out
        try:
            ib = parse_ibstat_text(text)
        except EvidenceError as exc:
            if rc == 0:  # ibstat said it succeeded: what it printed is garbled or cut, not absent
                raise EvidenceError(f"ibstat section: {exc}") from None
            out.append(Measurement(name="nic_firmware", text="", labels={"missing": f"{why('ibstat', rc)} ({exc})"}))
            return out
        for m in ib:
            if m.name == "ca_firmware":
                out.append(Measurement(name="nic_firmware", text=m.text, labels=dict(m.labels)))
        return out

    def measure(self, probe: Probe) -> list[Measurement]:
        out = [probe.top_text("driver_version", "driver_version"), probe.top_text("cuda_version", "cuda_version")]
        out += [gpu.text("vbios", "vbios_version") for gpu in probe.gpus if gpu.answered]
        return out

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: SoftwareThresholds = thresholds
        facts = Facts(measurements)
        findings = _node_fact_findings(facts, t) + _vbios_findings(facts, t)
        findings += _nic_findings([m for m in measurements if m.name == "nic_firmware"], t)
        findings += stack_findings(measurements, _pins(t))
        summary = _summary(measurements)
        pass_reason = ", ".join(f"{k} {v}" for k, v in summary.items() if v)
        if not findings:
            findings.append(Finding(PASS, pass_reason))
        return Verdict.from_findings(findings, pass_reason=pass_reason)

    consensus_names: ClassVar[frozenset[str] | None] = (
        frozenset({"kernel", "os", "driver_version", "cuda_version", "vbios", "nic_firmware"}) | STACK_NAMES
    )  # what _summary reads

    @classmethod
    def consensus(cls, per_node: dict[str, list[Measurement]]) -> dict[str, str]:
        facts_by_node = {host: _summary(ms) for host, ms in per_node.items()}
        odd: dict[str, list[str]] = {}
        for fact in _FACT_NAMES:
            values = {host: f[fact] for host, f in facts_by_node.items() if f.get(fact)}
            if len(values) < 2:
                continue
            (top, count), *_ = Counter(values.values()).most_common(1)
            if count * 2 <= len(values):
                continue  # no strict majority: nothing to call odd
            for host, value in values.items():
                if value != top:
                    odd.setdefault(host, []).append(
                        f"{fact} {value} differs from {count} of {len(values)} nodes ({top})"
                    )
        return {host: "; ".join(reasons) for host, reasons in odd.items()}


def _node_fact_findings(facts: Facts, t: SoftwareThresholds) -> list[Finding]:
    """Kernel, OS, driver and CUDA: missing is `error`, off a pinned value is `fail`."""
    findings: list[Finding] = []
    for name, label, pinned in (
        ("kernel", "kernel", t.expected_kernel),
        ("os", "OS", t.expected_os),
        ("driver_version", "driver version", ""),
        ("cuda_version", "CUDA version", ""),
    ):
        m = facts.get(name)
        if not m.text:
            findings.append(Finding(ERROR, f"{label} unavailable ({facts.missing(name)})"))
        elif pinned:
            m.threshold, m.ok = f"== {pinned}", m.text == pinned
            if not m.ok:
                findings.append(Finding(FAIL, f"{label} {m.text}, expected {pinned}"))
    return findings


def _vbios_findings(facts: Facts, t: SoftwareThresholds) -> list[Finding]:
    """Every GPU the driver lists: a VBIOS it cannot tell is `error`, off the pinned one is `fail`."""
    findings: list[Finding] = []
    for i in facts.listed:
        if i in facts.silent:
            findings.append(Finding(ERROR, f"GPU {i}: VBIOS unavailable (GPU not responding: {facts.silent[i]})"))
            continue
        m = facts.get("vbios", i)
        if not m.text:
            findings.append(Finding(ERROR, f"GPU {i}: VBIOS unavailable ({facts.missing('vbios', i)})"))
        elif t.expected_vbios:
            m.threshold, m.ok = f"== {t.expected_vbios}", m.text == t.expected_vbios
            if not m.ok:
                findings.append(Finding(FAIL, f"GPU {i}: VBIOS {m.text}, expected {t.expected_vbios}"))
    return findings


def _nic_findings(nics: list[Measurement], t: SoftwareThresholds) -> list[Finding]:
    """NIC firmware, judged only when pinned: none readable is `error`, a CA off it is `fail`."""
    findings: list[Finding] = []
    if not t.expected_nic_firmware:
        return findings
    if not any(m.text for m in nics):
        why = next((m.labels.get("missing") for m in nics if m.labels.get("missing")), "no CA listed")
        findings.append(Finding(ERROR, f"NIC firmware unavailable ({why})"))
    for m in nics:
        if m.text:
            m.threshold, m.ok = f"== {t.expected_nic_firmware}", m.text == t.expected_nic_firmware
            if not m.ok:
                ca = m.labels.get("ca", "?")
                findings.append(Finding(FAIL, f"{ca}: firmware {m.text}, expected {t.expected_nic_firmware}"))
    return findings


_FACT_NAMES = ("kernel", "OS", "driver", "CUDA", "VBIOS", "NIC firmware", *(c[3] for c in STACK_COMPONENTS))


def _stack(output: CommandOutput) -> list[Measurement]:
    sections = split_sections(output.stdout)
    cut = [name for name in STACK_SECTIONS if sections.get(name, ("", None))[1] is None]
    if cut:
        raise EvidenceError(
            f"{STACK_LABEL} output incomplete: section {', '.join(cut)} cut short (no '@@kiln-rc' line)"
        )
    return stack_measurements(sections, output.stderr)


def _pins(t: SoftwareThresholds) -> dict[str, str]:
    return {
        "nccl_lib_version": t.expected_nccl,
        "ofed_version": t.expected_ofed,
        "ucx_version": t.expected_ucx,
        "enroot_version": t.expected_enroot,
        "pyxis_version": t.expected_pyxis,
        "slurm_version": t.expected_slurm,
    }


def _summary(measurements: list[Measurement]) -> dict[str, str]:
    """One comparable string per fact; VBIOS and NIC firmware as the sorted set on the node."""

    def first(name: str) -> str:
        return next((m.text for m in measurements if m.name == name and m.text), "")

    vbios = sorted({m.text for m in measurements if m.name == "vbios" and m.text})
    nics = sorted(
        {
            f"{m.labels.get('ca_type')} {m.text}" if m.labels.get("ca_type") else m.text
            for m in measurements
            if m.name == "nic_firmware" and m.text
        }
    )
    return {
        "kernel": first("kernel"),
        "OS": first("os"),
        "driver": first("driver_version"),
        "CUDA": first("cuda_version"),
        "VBIOS": ", ".join(vbios),
        "NIC firmware": ", ".join(nics),
        **stack_summary(measurements),
    }
