"""Reading a node's own files (sysfs attributes) through a root its environment may move.

A check that reads files on the node runs `read_files_command`: one fixed `sh` script, with the
directory pattern and the file names as its arguments (never part of the script text, and quoted
by the transport like any argv). Every path is read below `$KILN_NODE_ROOT` when the node's
environment sets it: a real node leaves it unset and the script reads /sys itself; a simulated node
(testbed/sim `node_env`) sets it to its own tree in the node's state directory, where a test writes
a fault into one node's files.

The script prints one line per file: `ok<TAB>dir<TAB>name<TAB>first line` or
`unreadable<TAB>dir<TAB>name` (missing, or not readable), `dir` without the root; then
`end<TAB>N`, N the number of directories read. No `end` line: the output was cut, nothing is
trusted (`read_files` raises EvidenceError).
"""

from __future__ import annotations

import re

from checks.core.base import Command, EvidenceError

NODE_ROOT_ENV = "KILN_NODE_ROOT"
END = "end"

# `read` is a shell builtin: no process per file, so a node with hundreds of PCI functions is read
# in well under a second. The pattern is globbed here, below the root (the root itself quoted).
_SCRIPT = (
    'root=${KILN_NODE_ROOT:-}; pattern=$1; shift; n=0; tab=$(printf "\\t"); '
    'for dir in "$root"$pattern; do [ -d "$dir" ] || continue; n=$((n + 1)); rel=${dir#"$root"}; '
    'for name in "$@"; do value=; '
    'if { IFS= read -r value || [ -n "$value" ]; } 2>/dev/null < "$dir/$name"; '
    'then printf "ok%s%s%s%s%s%s\\n" "$tab" "$rel" "$tab" "$name" "$tab" "$value"; '
    'else printf "unreadable%s%s%s%s\\n" "$tab" "$rel" "$tab" "$name"; fi; done; done; '
    'printf "end%s%d\\n" "$tab" "$n"'
)
_PATTERN = re.compile(r"^(/[A-Za-z0-9_.:*-]+)+$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")

Files = dict[str, dict[str, str | None]]


def read_files_command(pattern: str, names: tuple[str, ...], *, label: str, timeout: float) -> Command:
    """Read `names` in every directory matching `pattern` (absolute, `*` globs, e.g.
    "/sys/bus/pci/devices/*"), below the node's root. Read-only: it shares with an identical read."""
    if not _PATTERN.match(pattern) or "/../" in f"{pattern}/" or "/./" in f"{pattern}/":
        raise ValueError(f"not an absolute directory pattern: {pattern!r}")
    bad = [n for n in names if not _NAME.match(n) or n in (".", "..")]
    if bad or not names:
        raise ValueError(f"not file names: {bad or names!r}")
    argv = ("sh", "-c", _SCRIPT, "kiln-read-files", pattern, *names)
    return Command(argv=argv, timeout=timeout, label=label, read_only=True)


def read_files(stdout: str, names: tuple[str, ...]) -> Files:
    """Directory -> file name -> its first line (None: missing or unreadable), from the script's
    output. Raises EvidenceError on output it did not write in full."""
    files: Files = {}
    end: int | None = None
    for line in stdout.splitlines():
        fields = line.split("\t", 3)
        if fields[0] == END and len(fields) == 2 and fields[1].isdigit():
            end = int(fields[1])
        elif fields[0] == "ok" and len(fields) == 4 and fields[2] in names:
            files.setdefault(fields[1], {})[fields[2]] = fields[3].strip()
        elif fields[0] == "unreadable" and len(fields) == 3 and fields[2] in names:
            files.setdefault(fields[1], {})[fields[2]] = None
        elif line.strip():
            raise EvidenceError(f"file reader printed an unexpected line: {line[:120]!r}")
    if end is None:
        raise EvidenceError("file reader output has no end line (cut short)")
    if end != len(files) or any(set(read) != set(names) for read in files.values()):
        raise EvidenceError(f"file reader output is incomplete: {len(files)} of {end} directories read in full")
    return files
