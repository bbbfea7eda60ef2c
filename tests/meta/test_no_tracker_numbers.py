"""Comments, docstrings, tests and docs explain what they guard in their own words: a bare tracker
number ("issue 12", "issue #12", "(Issue 13 item 3)") means nothing to a reader of the code, and the
tracker it points into is not part of the repository. A numbered issue of another project stays
where it is the source of a fact, named with its project ("wilicc/gpu-burn issue 124",
"nccl-tests issue #130")."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import REPO

# "issue 12", "Issue #12", "issues 12 and 13": the word, then a number.
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
# The word before it names another project's tracker: owner/repo, or a project name with a hyphen.
UPSTREAM = re.compile(r"(?:[\w.-]+/[\w.-]+|[\w.]+-[\w.-]+|nccl)$", re.IGNORECASE)
# A line break inside a comment or docstring, so that "wilicc/gpu-burn\n# issue 12" reads as one.
BREAK = re.compile(r"[ \t]*\n[ \t]*(?:#+[ \t]*)?")
# Captured tool output kept verbatim, the lock's generated text, and this file's own examples.
SKIPPED = ("tests/fixtures/", "requirements/", "tests/meta/test_no_tracker_numbers.py")


def tracked_text_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True, timeout=60)
    return [name for name in listed.stdout.splitlines() if not name.startswith(SKIPPED)]


def bare_numbers(text: str) -> list[str]:
    """The tracker numbers in `text` that name no project, each with the words before it."""
    flat = BREAK.sub(" ", text)
    found = []
    for match in ISSUE.finditer(flat):
        before = flat[: match.start()].rstrip()
        word = before.split()[-1] if before.split() else ""
        if not UPSTREAM.search(word.strip("(\"'`")):
            found.append(flat[max(0, match.start() - 40) : match.end()])
    return found


def test_no_file_cites_a_bare_issue_number() -> None:
    offenders = []
    for name in tracked_text_files():
        path = REPO / name
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # images and other binary files
        offenders += [f"{name}: ...{snippet}" for snippet in bare_numbers(text)]
    assert offenders == []


def test_the_scan_tells_a_bare_number_from_another_projects() -> None:
    assert bare_numbers("closing took 6.7 s (issue 10)") == ["closing took 6.7 s (issue 10"]
    assert bare_numbers("# Issue #13 item 3: 30 min") == ["# Issue #13"]
    assert bare_numbers('"""Kiln issue 13: racks"""') == ['"""Kiln issue 13']
    assert bare_numbers("as issues 12 and 13 say") == ["as issues 12"]
    assert bare_numbers("# (wilicc/gpu-burn\n# issue 12: errors)") == []
    assert bare_numbers("the alltoall factor (nccl-tests issue #130)") == []
    assert bare_numbers("nccl issue #812") == []
    assert bare_numbers("ISSUE_12 = 'gpu_burn_issue12.txt'; issue a certificate; TARGET_ISSUE_S = 300") == []
