"""Every parser kind against hostile inputs: empty, binary, NUL, deeply nested JSON/XML, garbage,
real fixtures cut short, real fixtures with NaN/inf/negative/huge numbers put in, a big input, and
a 200 MB file.

In-process, a parser raises nothing but EvidenceError, and no measurement value that comes out of
`parse_output` is NaN or infinite without `labels["invalid"]`. Through the CLI (`python -m checks
parse|judge`), the exit code is 0 or 2, an exit 2 prints exactly one line on stderr and nothing on
stdout, no traceback is ever printed, and a judged hostile input is never `pass`.
Deterministic (fixed seeds, fixed cut points) and fast: the whole module runs in seconds.
"""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from checks.__main__ import main
from checks.core.base import EvidenceError
from checks.core.parsers import MAX_INPUT_BYTES, PARSERS, parse_output

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
# Real outputs per parser kind (every kind has at least one).
FIXTURE_GLOBS: dict[str, tuple[str, ...]] = {
    "dcgmi_diag": ("dcgmi/*.json", "dcgmi/*.txt"),
    "dmesg": ("dmesg-xid/*.txt",),
    "elbencho": ("elbencho/*.txt",),
    "enroot_version": ("enroot/*.txt",),
    "fabricmanager_log": ("nvidia-smi-fabric/fabricmanager-log-*.log",),
    "kernel_cmdline": ("proc-cmdline/*.txt",),
    "lspci_acs": ("lspci/*.txt",),
    "mdtest": ("mdtest/mdtest-*.txt", "mdtest/io500-*.txt"),
    "fio": ("fio/*.json",),
    "gpu_burn": ("gpu-burn/*.txt",),
    "ibstat": ("ibstat/*.txt",),
    "ior": ("ior/*.txt",),
    "ipmitool_dcmi_power": ("ipmitool-dcmi/dcmi-*.txt", "power/dcmi_*.txt"),
    "ipmitool_sdr": ("ipmitool/*.txt",),
    "ipmitool_fru": ("ipmitool-fru/*.txt",),
    "ipmitool_sdr_power": ("ipmitool-dcmi/sdr-*.txt", "power/sdr_*.txt"),
    "nccl": ("nccl-tests/*_perf_*.txt", "nccl-alltoall/*.txt"),
    "nvbandwidth": ("nvbandwidth/*.txt",),
    "perftest": ("perftest/*.txt",),
    "nvidia_smi_fabric": ("nvidia-smi-fabric/nvidia-smi-q-*.txt",),
    "nvidia_smi_q": ("nvidia-smi-fabric/nvidia-smi-q-h100x8-*.txt",),
    "nvidia_smi_topo": ("nvidia-smi-topo/*.txt",),
    "nvidia_smi_xml": ("nvidia-smi/*.xml",),
    "nvlink_status": ("nvidia-smi/nvsmi_nvlink_status_*.txt",),
    "nvsmi_page_retirement": ("nvidia-smi/nvsmi_q_page_retirement_*.txt",),
    "ofed_info": ("ofed_info/*.txt",),
    "redfish_cdu": ("redfish-cdu/*.json", "power/redfish_cdu_*.json"),
    "redfish_pdu": ("redfish-pdu/*.json", "power/redfish_pdu_*.json"),
    "redfish_power": ("redfish-power/*.json", "power/redfish_power_*.json"),
    "redfish_thermal": ("redfish/*.json",),
    "slurm_version": ("slurm-version/*.txt",),
    "srun_container": ("pyxis/*.txt",),
    "ucx_info": ("ucx_info/*.txt",),
}
KINDS = sorted(PARSERS)
SUBSTITUTES = ("nan", "-nan", "inf", "-inf", "-1.0", "1e308")
JSON_SUBSTITUTES = ("NaN", "Infinity", "-Infinity", "-1", "1e308")


def _random_text(seed: int, size: int) -> str:
    rng = random.Random(seed)
    return bytes(rng.randrange(256) for _ in range(size)).decode("utf-8", errors="replace")


GENERIC: dict[str, str] = {
    "empty": "",
    "blank": "\n \n\t\n",
    "binary": _random_text(1, 65536),
    "nul": "\x00" * 4096,
    "nested array": "[" * 100_000 + "]" * 100_000,
    "nested object": '{"a":' * 50_000 + "1" + "}" * 50_000,
    "nested in a known key": '{"Temperatures": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "nested fio doc": '{"jobs": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "nested dcgmi doc": '{"DCGM GPU Diagnostic": ' + "{" * 50_000 + "}" * 50_000 + "}",
    "nested xml": "<?xml version='1.0'?><nvidia_smi_log>" + "<gpu>" * 50_000 + "</gpu>" * 50_000 + "</nvidia_smi_log>",
    "pipes": "a | b | c\n" * 2000,
    "numbers": "1 2 3 4 5 6 7 8 9\n" * 2000,
}


@cache
def fixtures(kind: str) -> tuple[tuple[str, str], ...]:
    found = []
    for pattern in FIXTURE_GLOBS[kind]:
        for path in sorted(FIXTURES.glob(pattern)):
            if not path.name.endswith(".source.txt"):
                found.append((path.name, path.read_text(encoding="utf-8", errors="replace")))
    return tuple(found)


def derived(kind: str) -> dict[str, str]:
    """Hostile variants of the kind's real outputs: cut short, and impossible numbers put in."""
    out: dict[str, str] = {}
    for name, text in fixtures(kind):
        for fraction in (0.5, 0.9):
            out[f"{name} cut at {fraction:.0%}"] = text[: int(len(text) * fraction)]
        is_json = text.lstrip().startswith("{")
        for value in JSON_SUBSTITUTES if is_json else SUBSTITUTES:
            pattern = r"(?<=[:\s\[,])-?\d+\.\d+(?=[\s,\]}])" if is_json else r"(?<![\w.])\d+\.\d+(?![\w.])"
            out[f"{name} floats -> {value}"] = re.sub(pattern, value, text)
    return out


def big(kind: str) -> dict[str, str]:
    """The kind's first real output repeated past 2 MB (in-process only: the CLI's cap is tested below)."""
    name, text = fixtures(kind)[0]
    return {f"{name} repeated to 2 MB": text * (2_000_000 // max(1, len(text)) + 1)}


def hostile(kind: str) -> dict[str, str]:
    return {**GENERIC, **derived(kind)}


# A value these substitutions put in: a judged pass must not rest on one.
IMPOSSIBLE = (-1.0, 1e308)


def test_it_has_a_real_output_for_every_parser_kind() -> None:
    assert set(FIXTURE_GLOBS) == set(PARSERS)
    assert all(fixtures(kind) for kind in KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_it_raises_only_evidence_errors_and_flags_every_non_finite_value(kind: str) -> None:
    problems = []
    for name, text in {**hostile(kind), **big(kind)}.items():
        try:
            PARSERS[kind](text)
        except EvidenceError:
            pass
        except Exception as exc:  # what this test exists to catch
            problems.append(f"{name}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        try:
            parsed = parse_output(kind, text)
        except EvidenceError:
            continue
        for m in parsed.measurements:
            if isinstance(m.value, float) and not math.isfinite(m.value) and "invalid" not in m.labels:
                problems.append(f"{name}: {m.name}={m.value} not flagged")
    assert not problems


def _reject_constant(token: str) -> None:
    raise AssertionError(f"the CLI printed {token}, which is not JSON")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("kind", KINDS)
def test_it_exits_0_or_2_with_one_line_and_never_passes_hostile_input(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    problems = []
    path = tmp_path / "input"
    for name, text in hostile(kind).items():
        path.write_text(text, encoding="utf-8")
        for command in ("parse", "judge"):
            code, out, err = run_cli(capsys, command, kind, str(path))
            where = f"{command} {name}"
            if code == 2:
                if out or len(err.splitlines()) != 1 or not err.startswith("error: "):
                    problems.append(f"{where}: exit 2 with stdout {out[:60]!r}, stderr {err[:200]!r}")
                continue
            if code != 0 or err:
                problems.append(f"{where}: exit {code}, stderr {err[:200]!r}")
                continue
            doc = json.loads(out, parse_constant=_reject_constant)
            if command == "judge":
                problems += [f"{where}: {why}" for why in _bad_passes(doc, substituted=" floats -> " in name)]
    assert not problems


def _bad_passes(doc: dict, *, substituted: bool) -> list[str]:
    """Why a judged result is a pass it must not be. A hostile input never passes; a real output
    with impossible numbers put in may pass only when none of them reached a measurement (the
    substitution may have touched a version string or a clock, not the evidence)."""
    bad = []
    for result in doc.get("checks") or [doc]:  # nvidia_smi_xml: one result per probe-based check
        if result["verdict"]["status"] != "pass":
            continue
        values = [m["value"] for m in result["measurements"]]
        flagged = [m for m in result["measurements"] if "invalid" in m.get("labels", {})]
        if not substituted or flagged or any(v in IMPOSSIBLE for v in values):
            bad.append(f"{result['check']} judged pass: {result['verdict']['reason'][:160]}")
    return bad


@pytest.mark.parametrize("command", ["parse", "judge"])
def test_it_refuses_a_200_mb_file_in_one_line_without_reading_it(tmp_path: Path, command: str) -> None:
    big = tmp_path / "big.out"
    with big.open("wb") as handle:
        handle.truncate(200 * 1024 * 1024)  # sparse: 200 MB that cost no disk
    for kind in KINDS:
        done = subprocess.run(
            [sys.executable, "-m", "checks", command, kind, str(big)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (done.returncode, done.stdout) == (2, ""), (kind, done.stderr)
        assert done.stderr.splitlines() == [
            f"error: {big}: input larger than 64 MiB ({200 * 1024 * 1024} bytes); Kiln reads at most that"
        ]


def test_it_stops_reading_an_endless_stream_at_the_cap() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "checks", "parse", "nccl", "/dev/zero"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == ["error: /dev/zero: input larger than 64 MiB; Kiln reads at most that"]
    assert MAX_INPUT_BYTES == 64 * 1024 * 1024


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("redfish_thermal", GENERIC["nested in a known key"]),
        ("fio", GENERIC["nested fio doc"]),
        ("dcgmi_diag", GENERIC["nested dcgmi doc"]),
        ("ipmitool_sdr", _random_text(2, 8192)),
        ("ipmitool_sdr", GENERIC["pipes"]),
    ],
    # Short ids: pytest puts the id in PYTEST_CURRENT_TEST, and a huge one makes exec fail (E2BIG).
    ids=["redfish_thermal-nested", "fio-nested", "dcgmi_diag-nested", "ipmitool_sdr-random", "ipmitool_sdr-pipes"],
)
def test_it_prints_no_traceback_from_the_real_process(tmp_path: Path, kind: str, text: str) -> None:
    path = tmp_path / "input"
    path.write_text(text, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "checks", "parse", kind, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
