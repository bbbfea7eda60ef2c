"""The checks reference of the documentation site (docs/hooks.py builds it from the registry when
mkdocs runs): every registered check kind has its section, and every threshold default its row with
the source comment written next to it in the code."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

import checks
from tests.conftest import REPO


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and inspect look the module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    return _load(REPO / "docs" / "hooks.py", "kiln_docs_hooks")


@pytest.fixture(scope="module")
def sections(hooks: ModuleType) -> dict[str, str]:
    """Check kind -> its section of the generated page."""
    page = hooks.checks_reference()
    parts = re.split(r"^## `([a-z0-9_]+)`$", page, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _rows(section: str, heading: str) -> dict[str, str]:
    """Field name -> its source cell, from the table under `### heading` of a section."""
    table = section.split(f"### {heading}\n", 1)[1].split("\n### ", 1)[0].split("\n**", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| .*? \| (.*) \|$", table, flags=re.MULTILINE)
    return dict(rows)


def test_every_registered_check_has_a_section(sections: dict[str, str]) -> None:
    assert sorted(sections) == sorted(checks.REGISTRY)


def test_every_threshold_default_has_its_source_on_the_page(hooks: ModuleType, sections: dict[str, str]) -> None:
    missing = []
    for kind, check in checks.REGISTRY.items():
        rows = _rows(sections[kind], "Thresholds")
        for field in dataclasses.fields(check.Thresholds):
            source = rows.get(field.name, "")
            if not source.strip() or source == hooks.NO_SOURCE:
                missing.append(f"{kind}.{field.name}")
    assert missing == []


def test_every_param_is_listed(sections: dict[str, str]) -> None:
    for kind, check in checks.REGISTRY.items():
        assert set(_rows(sections[kind], "Params")) == {f.name for f in dataclasses.fields(check.Params)}, kind


def test_the_source_is_the_comment_beside_the_default(sections: dict[str, str]) -> None:
    ecc = _rows(sections["ecc_health"], "Thresholds")
    assert "RMA Policy Thresholds for Row-Remapping" in ecc["allow_remap_failure"]
    nccl = sections["nccl_allreduce"]
    assert re.search(r"^\| H100-SXM-8 \| `min_busbw_gbps` \| `460.0` \| Azure azurehpc-health-checks", nccl, re.M)


def test_a_default_without_a_comment_shows_none(hooks: ModuleType, tmp_path: Path) -> None:
    module = tmp_path / "kiln_docs_sample.py"
    module.write_text(
        "from dataclasses import dataclass\n\n\n@dataclass\nclass T:\n"
        "    # Vendor guide, table 3.\n    floor: float = 1.0\n    shared: float = 2.0\n"
        "    ceiling: int = 3  # datasheet\n    after_inline: int = 4\n\n    alone: int = 5\n"
    )
    sample = _load(module, "kiln_docs_sample")
    sources = hooks._own_fields(sample.T)
    assert sources == {
        "floor": "Vendor guide, table 3.",
        "shared": "Vendor guide, table 3.",
        "ceiling": "datasheet",
        "after_inline": "",
        "alone": "",
    }


def test_the_site_builds_strict_and_offline() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["strict"] is True and config["hooks"] == ["docs/hooks.py"]
    assert config["theme"]["font"] is False  # no web fonts fetched from a CDN: air-gapped readers
    assert "$(MKDOCS) build --strict --quiet" in (REPO / "Makefile").read_text()
