"""Is the lock complete? Run with the python of a virtualenv that installed it with `--no-deps`.

`make install` installs the lock without resolving anything (`pip install --no-deps --require-hashes`),
so nothing newer than the lock can slip in: an older pip resolves a requested extra such as WeasyPrint's
`fonttools[woff]` against the newest release on the index instead of the locked one, and then refuses
the lock. Without resolving, a lock that misses a package would install a broken environment in
silence; this check is what makes that loud. It walks the requirement graph from the project's own
requirements through every installed distribution's metadata, the extras each edge asks for included,
with markers evaluated for this interpreter, and fails when:

- a lock entry is not exactly one `name==version` with at least one `--hash`, or names an extra
  (pip ignores extras under `--no-deps`, so an extra must appear as its own pinned packages);
- a required distribution is not in the lock, or the locked version does not satisfy a requirement;
- a required distribution is not installed at the locked version.

Exit 0 and one summary line when complete; exit 1 with one line per problem otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version


@dataclass(frozen=True)
class LockEntry:
    name: str
    version: Version
    marker: Marker | None  # the environments it is for (a universal lock): None for all


def logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """The lock's lines with continuations joined and comments dropped, with their first line number."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1].strip())
            continue
        pending.append(line.strip())
        joined = " ".join(part for part in pending if part)
        pending = []
        if joined:
            yield start, joined


def parse_lock(text: str) -> tuple[dict[str, LockEntry], list[str]]:
    entries: dict[str, LockEntry] = {}
    problems: list[str] = []
    for number, line in logical_lines(text):
        words = line.split()
        hashes = [word for word in words if word.startswith("--hash=")]
        spec = " ".join(word for word in words if not word.startswith("--hash="))
        if spec.startswith("-"):
            problems.append(f"line {number}: option {spec.split()[0]!r} is not allowed in a lock")
            continue
        try:
            requirement = Requirement(spec)
        except InvalidRequirement as exc:
            problems.append(f"line {number}: not a requirement ({exc})")
            continue
        pins = list(requirement.specifier)
        if len(pins) != 1 or pins[0].operator != "==" or "*" in pins[0].version:
            problems.append(f"line {number}: {spec!r} is not pinned with == to one version")
            continue
        if requirement.extras:
            problems.append(
                f"line {number}: {spec!r} names extras {sorted(requirement.extras)}: "
                "the lock must list an extra's packages as their own pinned lines"
            )
        if not hashes:
            problems.append(f"line {number}: {requirement.name}=={pins[0].version} has no --hash")
        # A universal lock pins a name once per environment: keep the entry for this interpreter.
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(requirement.name)
        if key in entries:
            problems.append(f"line {number}: {requirement.name} is pinned twice for this interpreter")
        entries[key] = LockEntry(requirement.name, Version(pins[0].version), requirement.marker)
    return entries, problems


def project_roots(pyproject: Path, extras: list[str], also: list[Path]) -> list[Requirement]:
    project = tomllib.loads(pyproject.read_text())["project"]
    specs = list(project.get("dependencies", []))
    for extra in extras:
        specs += project.get("optional-dependencies", {}).get(extra, [])
    for path in also:
        specs += [line for _, line in logical_lines(path.read_text())]
    return [Requirement(spec) for spec in specs]


def applies(requirement: Requirement, extra: str) -> bool:
    if requirement.marker is None:
        return True
    return requirement.marker.evaluate({"extra": extra})


def check(lock: dict[str, LockEntry], roots: list[Requirement]) -> list[str]:
    problems: list[str] = []
    # (distribution, extra it was asked for with, "" for none) → who asked, for the message.
    todo: list[tuple[Requirement, str]] = [(root, "the project") for root in roots if applies(root, "")]
    seen: set[tuple[str, str]] = set()
    while todo:
        requirement, asked_by = todo.pop()
        key = canonicalize_name(requirement.name)
        what = f"{requirement} (asked by {asked_by})"
        entry = lock.get(key)
        if entry is None:
            problems.append(f"{what}: {requirement.name} is not in the lock")
            continue
        if not requirement.specifier.contains(entry.version, prereleases=True):
            problems.append(f"{what}: the lock pins {entry.name}=={entry.version}")
        try:
            installed = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            problems.append(f"{what}: {requirement.name} is not installed")
            continue
        if Version(installed.version) != entry.version:
            problems.append(f"{what}: installed {installed.version}, the lock pins {entry.version}")
        for extra in ["", *sorted(requirement.extras)]:
            if (key, extra) in seen:
                continue
            seen.add((key, extra))
            if extra and extra not in (installed.metadata.get_all("Provides-Extra") or []):
                problems.append(f"{what}: {requirement.name} has no extra {extra!r}")
            parent = f"{requirement.name}[{extra}]" if extra else requirement.name
            for spec in installed.requires or []:
                child = Requirement(spec)
                if applies(child, extra) and (extra == "" or not applies(child, "")):
                    todo.append((child, parent))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("lock", type=Path, help="the lock file, e.g. requirements/dev.txt")
    parser.add_argument("--pyproject", type=Path, default=Path("pyproject.toml"))
    parser.add_argument("--extra", action="append", default=[], help="the project's extras the lock covers")
    parser.add_argument("--also", type=Path, action="append", default=[], help="more root requirements (.in)")
    args = parser.parse_args(argv)
    lock, problems = parse_lock(args.lock.read_text())
    problems += check(lock, project_roots(args.pyproject, args.extra, args.also))
    if problems:
        print(f"{args.lock}: the lock is not complete ({len(problems)} problems):", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"{args.lock}: complete ({len(lock)} pinned distributions, every requirement and extra in it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
