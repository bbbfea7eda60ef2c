"""Readers of the Slurm container path (checks/software/slurm_container.py): the site image param, the
nvidia-smi GPU table, and what srun + pyxis + enroot printed.

Pure functions, tested on real outputs (tests/fixtures/pyxis: a failed import as pyxis prints it,
NVIDIA/pyxis#118) and on the testbed's fake srun, which prints pyxis' own wording
(NVIDIA/pyxis 0.24 pyxis_slurmstepd.c / enroot.c / common.c):

    pyxis: importing docker image: IMAGE
    slurmstepd: error: pyxis: child 1234 failed with error code: 1
    slurmstepd: error: pyxis: failed to import docker image: IMAGE
    slurmstepd: error: pyxis: printing enroot log file:
    slurmstepd: error: pyxis:     [ERROR] URL https://... returned error code: 404 Not Found
    slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1
    srun: error: gpu001: task 0: Exited with exit code 1

Before pyxis 0.13 the import line has no image ("failed to import docker image") and a
"couldn't start container" line follows; both are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from checks.core.base import ERROR, FAIL, EvidenceError, Measurement, ParamsError
from checks.core.parsers import Parsed, register_parser
from checks.software.consistency import split_sections

# Docker references: a repository name of at most 255 characters (distribution/reference
# NameTotalLengthMax), a tag of at most 128 ([\w][\w.-]{0,127}) and a sha256 digest of 71
# ("sha256:" + 64 hex), plus enroot's "REGISTRY#" and "USER@": 512 holds every valid one and a
# squashfs path of a sane length, and refuses a pasted script.
IMAGE_MAX_LEN = 512
# enroot/pyxis image syntax ([USER@][REGISTRY#]IMAGE[:TAG][@DIGEST], pyxis args.c) or a squashfs
# path: nothing a shell or srun could read as anything else (no space, quote, ;, $, `, |, &, =, ,).
_IMAGE = re.compile(r"[A-Za-z0-9._:/#@+-]+")
_PROGRAM = re.compile(r"[A-Za-z0-9._/+-]{1,255}")
# Slurm partition, account and reservation names as sites write them.
_SLURM_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def check_image(image: str) -> None:
    """ParamsError unless `image` is an enroot URI or squashfs path, safe as one argv element."""
    if len(image) > IMAGE_MAX_LEN:
        raise ParamsError(f"param 'image': longer than {IMAGE_MAX_LEN} characters")
    if image.startswith("-"):
        raise ParamsError(f"param 'image': {image!r} starts with '-' (srun would read an option)")
    if not _IMAGE.fullmatch(image):
        bad = sorted({c for c in image if not _IMAGE.fullmatch(c)})
        raise ParamsError(
            f"param 'image': {image!r} has characters outside [A-Za-z0-9._:/#@+-]: {''.join(bad)!r} "
            "(an enroot URI such as nvcr.io#nvidia/pytorch:24.05-py3, or a squashfs path)"
        )


def check_program(name: str, value: str) -> None:
    if not _PROGRAM.fullmatch(value) or value.startswith("-"):
        raise ParamsError(f"param {name!r}: {value!r} is not a program name or path ([A-Za-z0-9._/+-], no leading '-')")


def check_slurm_name(name: str, value: str) -> None:
    if value and (not _SLURM_NAME.fullmatch(value) or value.startswith("-")):
        raise ParamsError(f"param {name!r}: {value!r} is not a Slurm name ([A-Za-z0-9_.-], no leading '-')")


# nvidia-smi --query-gpu=index,uuid,driver_version --format=csv,noheader
# ---------------------------------------------------------------------------------------------

QUERY_FIELDS = "index,uuid,driver_version"
_UUID = re.compile(r"GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
_DRIVER = re.compile(r"\d{2,4}\.\d{1,4}(\.\d{1,4})?")
# nvidia-smi exits 6 with "No devices were found" (its documented NVML_ERROR_NOT_FOUND return).
NO_DEVICES = "No devices were found"


@dataclass(frozen=True)
class GpuRow:
    index: int
    uuid: str
    driver: str


def parse_gpu_csv(text: str) -> list[GpuRow]:
    """Rows of `nvidia-smi --query-gpu=index,uuid,driver_version --format=csv,noheader`.

    "No devices were found" is zero rows; any other line that is not three well-formed fields
    (index, GPU-uuid, driver) raises EvidenceError naming it, as do a repeated index or UUID."""
    rows: list[GpuRow] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line == NO_DEVICES:
            continue
        if line.lower().replace(" ", "") == QUERY_FIELDS:
            continue  # a header line (--format=csv without noheader)
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3 or not fields[0].isdigit() or not _UUID.fullmatch(fields[1]):
            raise EvidenceError(f"unreadable nvidia-smi GPU line: {line[:120]!r}")
        if not _DRIVER.fullmatch(fields[2]):
            raise EvidenceError(f"unreadable driver version in nvidia-smi line: {line[:120]!r}")
        rows.append(GpuRow(int(fields[0]), fields[1], fields[2]))
    indices, uuids = [r.index for r in rows], [r.uuid for r in rows]
    if len(set(indices)) != len(indices) or len(set(uuids)) != len(uuids):
        raise EvidenceError("impossible evidence: nvidia-smi lists a GPU index or UUID twice")
    return rows


def gpu_measurements(rows: list[GpuRow], where: str) -> list[Measurement]:
    """`<where>_gpus` (count), `<where>_gpu_uuid` per GPU and `<where>_driver` (the set on the node)."""
    out = [Measurement(name=f"{where}_gpus", value=float(len(rows)))]
    out += [Measurement(name=f"{where}_gpu_uuid", gpu=r.index, text=r.uuid) for r in rows]
    drivers = sorted({r.driver for r in rows})
    driver = Measurement(name=f"{where}_driver", text=", ".join(drivers))
    if not drivers:
        driver.labels["missing"] = "no GPU listed"
    out.append(driver)
    return out


# What srun, pyxis and enroot said
# ---------------------------------------------------------------------------------------------

_PYXIS = re.compile(r"pyxis:(\s+)(.*\S)")
_SRUN_ERROR = re.compile(r"^srun: (?:error|fatal): (.*\S)")
_TASK_EXIT = re.compile(r"task \d+: (Exited with exit code|Killed|Terminated)")
_UNRECOGNIZED = re.compile(r"srun: (?:unrecognized|invalid) option '?--container-image")
_NOT_FOUND = re.compile(r"srun: (?:command )?not found|srun: No such file or directory|No such file or directory.*srun")
_IMPORT_FAILED = ("failed to import docker image", "failed to create container filesystem")
# A registry that is down or unreachable (enroot fetches with curl): HTTP 5xx or 429, or curl's
# own errors (curl(1) EXIT CODES): 6 could not resolve host, 7 failed to connect, 28 timeout,
# 35 TLS connect error, 52 empty reply, 56 receive failure. Not the node's doing: see
# checks/software/slurm_container.py for why these are `error` while every other refusal is `fail`.
_REGISTRY_DOWN = re.compile(
    r"returned error code: (5\d\d|429)\b|curl: \((6|7|28|35|52|56)\)|Could not resolve host|"
    r"Connection timed out|Failed to connect|Operation timed out",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class StepProblem:
    """Why the container step did not run: `status` FAIL (the node or site cannot run the image)
    or ERROR (nothing could be told about the node), `kind` (pull, start, pyxis, srun), `reason`."""

    status: str
    kind: str
    reason: str


def pyxis_messages(stderr: str) -> tuple[list[str], list[str]]:
    """(pyxis' own messages, the enroot log lines it quotes), in order."""
    own: list[str] = []
    log: list[str] = []
    for line in stderr.splitlines():
        m = _PYXIS.search(line)
        if m is None:
            continue
        (log if len(m.group(1)) >= 3 else own).append(m.group(2))
    return own, log


def _enroot_line(log: list[str]) -> str:
    """The enroot line that says why: its [ERROR], else a curl or other non-[INFO] line."""
    for line in log:
        if line.startswith("[ERROR]"):
            return line
    rest = [line for line in log if not line.startswith(("[INFO]", "[WARN]"))]
    return rest[-1] if rest else ""


def step_problem(stdout: str, stderr: str, exit_code: int) -> StepProblem | None:
    """What kept the srun step from running the test inside the container, or None when it ran."""
    text = stdout + "\n" + stderr
    if _UNRECOGNIZED.search(text):
        line = next(x.strip() for x in text.splitlines() if _UNRECOGNIZED.search(x))
        return StepProblem(FAIL, "pyxis", f"pyxis is not loaded: srun does not know --container-image ({line})")
    own, log = pyxis_messages(stderr)
    errors = [m for m in own if not m.startswith(("importing docker image", "imported docker image"))]
    if errors:
        return _pyxis_problem(errors, log)
    if exit_code == 127 and _NOT_FOUND.search(text):
        return StepProblem(
            ERROR, "srun", "srun not found on the node: the Slurm client is not installed or not on PATH"
        )
    srun = [m.group(1) for m in map(_SRUN_ERROR.match, stderr.splitlines()) if m and not _TASK_EXIT.search(m.group(1))]
    if srun:
        return StepProblem(ERROR, "srun", f"srun could not run the step: {srun[0][:300]}")
    return None


def _pyxis_problem(errors: list[str], log: list[str]) -> StepProblem:
    enroot = _enroot_line(log)
    said = next((e for e in errors if any(k in e for k in _IMPORT_FAILED)), "")
    quote = f"pyxis: {said or errors[0]}" + (f"; enroot: {enroot}" if enroot else "")
    quote = quote[:400]
    if said and _REGISTRY_DOWN.search(enroot or said):
        reason = f"the registry is unavailable, the image was not pulled ({quote}): the node was not tested"
        return StepProblem(ERROR, "pull", reason)
    if said:
        return StepProblem(FAIL, "pull", f"the container image cannot be pulled: {quote}")
    return StepProblem(FAIL, "start", f"the container could not start: {quote}")


def read_sections(stdout: str, expected: tuple[str, ...]) -> dict[str, tuple[str, int | None]]:
    """The container script's sections; EvidenceError when one is missing or cut short."""
    sections = split_sections(stdout)
    cut = [name for name in expected if sections.get(name, ("", None))[1] is None]
    if cut:
        raise EvidenceError(
            f"container output incomplete: section {', '.join(cut)} missing or cut short (no '@@kiln-rc' line)"
        )
    return sections


@register_parser("srun_container")
def parse_srun_container(text: str) -> Parsed:
    """`python -m checks parse srun_container FILE`: what srun printed for a --container-image step
    that failed before the test ran (a pull or start failure): one `container_start` measurement
    whose text is the quoted pyxis/enroot reason. A capture where the step ran has no such
    failure, and raises EvidenceError saying so (the check itself reads that case)."""
    problem = step_problem("", text, 1)
    if problem is None:
        raise EvidenceError("no pyxis, enroot or srun failure in this output")
    labels = {"kind": problem.kind, "status": problem.status}
    return Parsed(measurements=[Measurement(name="container_start", text=problem.reason, labels=labels)])
