"""One list of Debian packages (requirements/debian.txt): .ci/run installs every scope, the image the
runtime scope, and the docs' prerequisites table (docs/reference/system-packages.md) names exactly the
same packages. The runtime scope
is enough to issue a certificate: every library and font file WeasyPrint maps to lay out a PDF belongs
to a package that scope installs, directly or as a dependency."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import IN_CI, REPO

SCOPES = ("host", "runtime", "test")


def _packages(*scopes: str) -> list[str]:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "system_packages.sh"), *scopes], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


# The prerequisites table; README.md points to it.
PACKAGES_PAGE = REPO / "docs" / "reference" / "system-packages.md"


def _packages_table() -> str:
    text = PACKAGES_PAGE.read_text()
    start = text.index("Prerequisites (")
    end = text.index("\n\n", text.index("\n|", start))
    return text[start:end]


def test_it_lists_each_package_once_in_a_known_scope() -> None:
    every = _packages(*SCOPES)
    assert len(every) == len(set(every))
    assert {"libpango-1.0-0", "libpangoft2-1.0-0", "fonts-dejavu-core"} <= set(_packages("runtime"))
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "system_packages.sh"), "runtime", "prod"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "unknown scope 'prod'" in done.stderr


def test_the_docs_table_names_the_same_packages() -> None:
    first_column = [row.split("|")[1] for row in _packages_table().splitlines() if row.startswith("| ")]
    named = {name for cell in first_column for name in re.findall(r"`([a-z0-9][a-z0-9.+-]+)`", cell)}
    assert named == set(_packages(*SCOPES))


def test_ci_and_the_image_install_from_the_list() -> None:
    assert "scripts/system_packages.sh host runtime test" in (REPO / ".ci" / "run").read_text()
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "$(bash scripts/system_packages.sh runtime)" in dockerfile
    assert not re.search(r"apt-get install[^$\n]*\b(openssh|lib|fonts|chromium)", dockerfile)


_MAPPED = """
import weasyprint
weasyprint.HTML(string="<h1>Certificate</h1><p>Kiln</p>").write_pdf()
for line in open("/proc/self/maps"):
    path = line.split()[-1]
    if path.startswith("/usr/") and (".so" in path or "/fonts/" in path):
        print(path)
"""


@pytest.mark.skipif(not (shutil.which("dpkg") and shutil.which("apt-cache")) and not IN_CI, reason="not Debian")
def test_the_runtime_scope_brings_what_weasyprint_loads() -> None:
    mapped = sorted(
        set(
            subprocess.run(
                [sys.executable, "-c", _MAPPED], capture_output=True, text=True, check=True, timeout=120
            ).stdout.split()
        )
    )
    assert any("libpango" in path for path in mapped) and any("/fonts/" in path for path in mapped)
    owners = subprocess.run(["dpkg", "-S", *mapped], capture_output=True, text=True, timeout=60).stdout
    needed = {line.split(":")[0] for line in owners.splitlines()}
    closure_argv = [
        "apt-cache",
        "depends",
        "--recurse",
        "--no-recommends",
        "--no-suggests",
        "--no-conflicts",
        "--no-breaks",
        "--no-replaces",
        "--no-enhances",
        *_packages("runtime"),
    ]
    closure = {
        line.strip()
        for line in subprocess.run(
            closure_argv, capture_output=True, text=True, check=True, timeout=120
        ).stdout.splitlines()
        if not line.startswith(" ")
    }
    assert needed and needed <= closure, sorted(needed - closure)
