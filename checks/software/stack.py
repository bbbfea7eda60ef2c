"""The cluster software stack of a node, for sw_consistency (checks/software/consistency.py): NCCL, the RDMA
stack (MLNX_OFED or DOCA-OFED), UCX (HPC-X), Enroot, Pyxis and Slurm, read with read-only commands
by one fixed `sh -c` script (no input is interpolated), one section per component:

- nccl: every `libnccl.so*` in the loader cache (`ldconfig -p`), resolved with `readlink -f`
  (libnccl.so.2 -> libnccl.so.2.21.5): the version is the one the dynamic loader gives programs,
  whatever package (or none) put it there;
- ofed: `ofed_info -s` ("MLNX_OFED_LINUX-23.07-0.5.1.2:", DOCA-OFED "OFED-internal-24.07-0.3.5.0.110:");
- ucx: `ucx_info -v` ("# Library version: 1.15.0" since UCX 1.14, "# Version 1.13.0" in 1.13,
  "# UCT version=1.12.0 revision ..." before);
- enroot: `enroot version` ("3.5.0");
- slurm: `srun --version` ("slurm 23.11.4"; Debian's build prints "slurm-wlm 19.05.5");
- pyxis: whether `srun --help` lists pyxis' `--container-image` (the SPANK plugin is loaded), and
  the `nvslurm-plugin-pyxis` package version (dpkg-query or rpm; pyxis has no version command).

Conventions, as for ibstat in sw_consistency: a tool that is not installed (exit 127) is a recorded
absence, text "" with labels["missing"] "... not installed" (NCCL: no libnccl in the loader cache),
judged only when that component is pinned (then `error`: absent from PATH is not proof of absent
from the node). A tool that is installed but exits non-zero, or prints what no version parser
reads, is unreadable: `error` naming the component. Pyxis not loaded in srun is an observation
("not loaded"), compared and pinned like a version. Across nodes, `consensus` compares each
component's version, "not installed" included: one node without enroot among nodes with it is the
odd one out.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from checks.core.base import ERROR, FAIL, EvidenceError, Finding, Measurement
from checks.core.parsers import Parsed, register_parser

STACK_LABEL = "stack versions"
# ldconfig lives in /sbin on most distributions, outside a non-root user's PATH.
STACK_SCRIPT = r"""PATH="$PATH:/usr/sbin:/sbin"
has() { command -v "$1" >/dev/null 2>&1; }
begin() { printf '@@kiln-section %s\n' "$1"; }
end() { printf '\n@@kiln-rc %s\n' "$1"; }
absent() { echo "$1: command not found" >&2; printf '@@kiln-rc 127\n'; }
begin nccl
if has ldconfig; then cache=$(ldconfig -p); r=$?
  for lib in $(printf '%s\n' "$cache" | awk '$1 ~ /^libnccl\.so/ {print $NF}'); do
    printf '%s -> %s\n' "$lib" "$(readlink -f -- "$lib")"; done; end "$r"
else absent ldconfig; fi
begin ofed
if has ofed_info; then ofed_info -s; end "$?"; else absent ofed_info; fi
begin ucx
if has ucx_info; then ucx_info -v; end "$?"; else absent ucx_info; fi
begin enroot
if has enroot; then enroot version; end "$?"; else absent enroot; fi
begin slurm
if has srun; then srun --version; end "$?"; else absent srun; fi
begin pyxis
if has srun; then help=$(srun --help 2>&1); r=$?
  printf '%s\n' "$help" | grep -F -e '--container-image' | head -n 1
  v=''
  if has dpkg-query; then v=$(dpkg-query -W -f='${Version}' nvslurm-plugin-pyxis 2>/dev/null) || v=''
  elif has rpm; then v=$(rpm -q --qf '%{VERSION}-%{RELEASE}' nvslurm-plugin-pyxis 2>/dev/null) || v=''; fi
  printf 'package: %s\n' "$v"; end "$r"
else absent srun; fi
"""
# One section per component, in the script's order: (section, measurement, tool, fact name).
COMPONENTS: tuple[tuple[str, str, str, str], ...] = (
    ("nccl", "nccl_lib_version", "ldconfig", "NCCL"),
    ("ofed", "ofed_version", "ofed_info", "RDMA stack"),
    ("ucx", "ucx_version", "ucx_info", "UCX"),
    ("enroot", "enroot_version", "enroot", "Enroot"),
    ("slurm", "slurm_version", "srun", "Slurm"),
    ("pyxis", "pyxis_version", "srun", "Pyxis"),
)
SECTIONS = tuple(c[0] for c in COMPONENTS)
STACK_NAMES = frozenset(c[1] for c in COMPONENTS)
# ldconfig, ofed_info, ucx_info, enroot, srun answer in well under a second each; ucx_info loads its
# transports (a few seconds on a node with many HCAs). Conservative default; tune per site.
STACK_TIMEOUT_S = 60.0
NOT_INSTALLED = "not installed"
NOT_LOADED = "not loaded"


@dataclass(frozen=True)
class Version:
    """What one tool said: `text` the comparable value, `labels` the parts (flavour, version)."""

    text: str
    labels: dict[str, str]


_NCCL_FILE = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)$")
_OFED = re.compile(r"^(MLNX_OFED_LINUX|OFED-internal|OFED)-(\d[\w.-]*?):?$")
_UCX = (
    re.compile(r"^#?\s*Library version:\s*(\d[\w.-]*)\s*$"),
    re.compile(r"^#?\s*Version\s+(\d[\w.-]*)\s*$"),
    re.compile(r"^#?\s*UCT version=(\d[\w.-]*)(\s|$)"),
)
_ENROOT = re.compile(r"^(\d+\.\d+(?:\.\d+)?[\w.+~-]*)$")
_SLURM = re.compile(r"^(slurm(?:-wlm)?)\s+(\d[\w.-]*)$")
_PYXIS_PACKAGE = re.compile(r"^package:\s*(\S*)\s*$")


def read_nccl(text: str) -> Version | None:
    """'LIB -> RESOLVED' lines: the set of NCCL versions the loader resolves; None: no libnccl."""
    versions: set[str] = set()
    for line in text.splitlines():
        if "->" not in line:
            continue
        lib, resolved = (part.strip() for part in line.split("->", 1))
        m = _NCCL_FILE.search(os.path.basename(resolved))
        if m is None:
            raise ValueError(f"{lib} resolves to {resolved or '?'}, which names no NCCL version")
        versions.add(m.group(1))
    if not versions:
        return None
    ordered = sorted(versions)
    return Version(", ".join(ordered), {"version": ordered[-1]})


def read_ofed(text: str) -> Version:
    line = _first_line(text)
    m = _OFED.match(line)
    if m is None:
        raise ValueError(f"not an ofed_info -s line: {line[:80]!r}")
    flavour = "DOCA-OFED" if m.group(1) == "OFED-internal" else m.group(1)
    return Version(f"{m.group(1)}-{m.group(2)}", {"flavour": flavour, "version": m.group(2)})


def read_ucx(text: str) -> Version:
    for pattern in _UCX:
        for line in text.splitlines():
            m = pattern.match(line.strip())
            if m:
                return Version(m.group(1), {"version": m.group(1)})
    raise ValueError(f"no UCX version in ucx_info -v output: {_first_line(text)[:80]!r}")


def read_enroot(text: str) -> Version:
    line = _first_line(text)
    if not _ENROOT.match(line):
        raise ValueError(f"not an enroot version: {line[:80]!r}")
    return Version(line, {"version": line})


def read_slurm(text: str) -> Version:
    line = _first_line(text)
    m = _SLURM.match(line)
    if m is None:
        raise ValueError(f"not a Slurm version line: {line[:80]!r}")
    return Version(m.group(2), {"version": m.group(2), "build": m.group(1)})


def read_pyxis(text: str) -> Version:
    """'not loaded' when srun's help lacks --container-image; else the package version, or
    'loaded (version unknown)' for a pyxis built from source (no package)."""
    loaded = any("--container-image" in line for line in text.splitlines())
    package = next((m.group(1) for m in map(_PYXIS_PACKAGE.match, text.splitlines()) if m), None)
    if package is None:
        raise ValueError("no 'package:' line in the pyxis section")
    if not loaded:
        return Version(NOT_LOADED, {"loaded": "no", "package": package})
    return Version(package or "loaded (version unknown)", {"loaded": "yes", "version": package})


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


_READERS = {
    "ofed": read_ofed,
    "ucx": read_ucx,
    "enroot": read_enroot,
    "slurm": read_slurm,
    "pyxis": read_pyxis,
}


def stack_measurements(sections: dict[str, tuple[str, int | None]], stderr: str) -> list[Measurement]:
    """One text measurement per component (see the module docstring for absent vs unreadable)."""
    errors = [s.strip() for s in stderr.splitlines() if s.strip()]
    out: list[Measurement] = []
    for section, name, tool, _ in COMPONENTS:
        text, rc = sections[section]
        m = Measurement(name=name, text="")
        out.append(m)
        if rc == 127:
            m.labels["missing"] = f"{tool} {NOT_INSTALLED}"
            continue
        if rc != 0:
            said = [e for e in errors if tool in e] or errors
            m.labels.update(unreadable="1", missing=f"{tool} exited {rc}" + (f": {said[-1][:200]}" if said else ""))
            continue
        try:
            version = read_nccl(text) if section == "nccl" else _READERS[section](text)
        except ValueError as exc:
            m.labels.update(unreadable="1", missing=str(exc))
            continue
        if version is None:
            m.labels["missing"] = f"NCCL {NOT_INSTALLED} (no libnccl in the loader cache)"
            continue
        m.text = version.text
        m.labels.update(version.labels)
    return out


def stack_findings(measurements: list[Measurement], pins: dict[str, str]) -> list[Finding]:
    """Unreadable is `error`; a pinned component off its pin is `fail` ("not loaded" included),
    absent while pinned is `error`. `pins`: measurement name -> expected ("" = not pinned)."""
    findings: list[Finding] = []
    facts = {m.name: m for m in measurements if m.name in STACK_NAMES}
    for _, name, _, label in COMPONENTS:
        m, pinned = facts.get(name), pins.get(name, "")
        if m is None:
            findings.append(Finding(ERROR, f"{label} version unavailable (not read)"))
            continue
        if m.labels.get("unreadable"):
            findings.append(Finding(ERROR, f"{label} version unreadable ({m.labels.get('missing', '')})"))
        elif not m.text:
            if pinned:
                findings.append(Finding(ERROR, f"{label} version unavailable ({m.labels.get('missing', '')})"))
        elif pinned:
            m.threshold, m.ok = f"== {pinned}", pinned in (m.text, m.labels.get("version"))
            if not m.ok:
                findings.append(Finding(FAIL, f"{label} {m.text}, expected {pinned}"))
    return findings


def stack_summary(measurements: list[Measurement]) -> dict[str, str]:
    """Fact name -> comparable value: the version, or 'not installed'; '' when unreadable."""
    facts = {m.name: m for m in measurements if m.name in STACK_NAMES}
    summary: dict[str, str] = {}
    for _, name, _, label in COMPONENTS:
        m = facts.get(name)
        if m is None or m.labels.get("unreadable"):
            summary[label] = ""
        else:
            summary[label] = m.text or NOT_INSTALLED
    return summary


def _parsed(reader_name: str, text: str) -> Parsed:
    try:
        version = _READERS[reader_name](text)
    except ValueError as exc:
        raise EvidenceError(str(exc)) from None
    name = next(c[1] for c in COMPONENTS if c[0] == reader_name)
    return Parsed(measurements=[Measurement(name=name, text=version.text, labels=dict(version.labels))])


@register_parser("ofed_info")
def parse_ofed_info(text: str) -> Parsed:
    """`python -m checks parse ofed_info FILE`: one `ofed_info -s` output."""
    return _parsed("ofed", text)


@register_parser("ucx_info")
def parse_ucx_info(text: str) -> Parsed:
    """`python -m checks parse ucx_info FILE`: one `ucx_info -v` output (any UCX 1.x format)."""
    return _parsed("ucx", text)


@register_parser("enroot_version")
def parse_enroot_version(text: str) -> Parsed:
    """`python -m checks parse enroot_version FILE`: one `enroot version` output."""
    return _parsed("enroot", text)


@register_parser("slurm_version")
def parse_slurm_version(text: str) -> Parsed:
    """`python -m checks parse slurm_version FILE`: one `srun --version` / `sinfo --version` output."""
    return _parsed("slurm", text)
