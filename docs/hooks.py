"""mkdocs hooks: the pages generated at build time, so they never drift from the code.

- `reference/checks.md`: every registered check kind (the `checks` package, pure Python: no Django),
  with its params and thresholds, each default with the source comment written next to it in the
  dataclass, the profile overrides, the evidence rules and the remedies the triage view gives.
- `changelog.md`: CHANGELOG.md, as it is at the top of the repository.
- `reference/api.md`: every REST endpoint, from the OpenAPI schema drf-spectacular builds from the
  code (`manage.py spectacular`, in a child process with throw-away settings).

tests/docs/test_checks_reference.py holds the checks page to the registry.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import tokenize
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CHECKS_PAGE = "reference/checks.md"
API_PAGE = "reference/api.md"
CHANGELOG_PAGE = "changelog.md"
# What the page says where the code gives no comment (tests/docs holds thresholds to having one).
NO_SOURCE = "(no source given)"
# Profile values a check takes from a shared table of its module, whose comments give their sources.
SHARED_PROFILES = "from the check's shared profile table, each value's source in the comment beside it in the code"


# --- source comments of dataclass fields -----------------------------------------------------------


def _comments(source: str) -> dict[int, str]:
    """Line number (1-based) -> the text of the comment on that line."""
    found: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string.lstrip("#").strip()
    return found


def _block_above(source: str, comments: dict[int, str], line: int) -> str:
    """The comment lines right above line `line` (full-line comments only), joined."""
    lines = source.splitlines()
    above: list[str] = []
    line -= 1
    while line in comments and lines[line - 1].lstrip().startswith("#"):
        above.insert(0, comments[line])
        line -= 1
    return " ".join(above)


def _own_fields(cls: type) -> dict[str, str]:
    """Field name -> its source comment, for the fields `cls` itself declares. A field's comment is
    the block of comment lines right above it and the comment at the end of its line(s); a field
    with neither, on the line right after another field, shares the block above that one (one
    comment heads a group of fields); after a blank line it has none."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments = _comments(source)
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    sources: dict[str, str] = {}
    previous, previous_end = "", -1
    for statement in body.body:
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            continue
        end = statement.end_lineno or statement.lineno
        inline = [comments[n] for n in range(statement.lineno, end + 1) if n in comments]
        heading = _block_above(source, comments, statement.lineno)
        text = " ".join([heading, *inline]).strip()
        if not text and statement.lineno == previous_end + 1:
            text = previous
        sources[statement.target.id] = text
        # Only a heading comment carries on to the fields below it; a line's own comment does not.
        previous = heading or (previous if not inline and statement.lineno == previous_end + 1 else "")
        previous_end = end
    return sources


def field_sources(cls: type) -> dict[str, str]:
    """Field name -> source comment for every field of dataclass `cls`, inherited ones included
    (a subclass's own comment wins)."""
    sources: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass) and klass.__module__.startswith("checks"):
            sources.update(_own_fields(klass))
    return sources


def _profile_comments(check: type) -> dict[tuple[str, str], str]:
    """(profile, threshold) -> the source comment of that value in `profile_thresholds`: the one on
    its line, else the one above its profile, else the one above `profile_thresholds`."""
    source = textwrap.dedent(inspect.getsource(check))
    comments = _comments(source)
    found: dict[tuple[str, str], str] = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Dict)):
            continue
        if not (isinstance(node.target, ast.Name) and node.target.id == "profile_thresholds"):
            continue
        above = _block_above(source, comments, node.lineno)
        for profile_key, values in zip(node.value.keys, node.value.values, strict=True):
            if not (isinstance(profile_key, ast.Constant) and isinstance(values, ast.Dict)):
                continue
            # A profile with no comment of its own shares the one above it (one comment, several profiles).
            above = _block_above(source, comments, profile_key.lineno) or above
            for key in values.keys:
                if isinstance(key, ast.Constant):
                    own = comments.get(key.lineno, "") if key.lineno != profile_key.lineno else ""
                    found[(str(profile_key.value), str(key.value))] = own or above
    return found


# --- the checks reference ----------------------------------------------------------------------------


def _cell(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else (f'"{value}"' if value else '""')
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


def _prose(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fields_table(cls: type, what: str) -> list[str]:
    sources = field_sources(cls)
    defaults = dataclasses.asdict(cls())
    if not defaults:
        return [f"No {what}s.", ""]
    lines = [f"| {what} | default | source and meaning |", "| --- | --- | --- |"]
    for name, value in defaults.items():
        lines.append(f"| `{name}` | {_cell(value)} | {_prose(sources.get(name) or NO_SOURCE)} |")
    return [*lines, ""]


def _profiles(check: type) -> list[str]:
    overrides: dict[str, dict[str, Any]] = check.profile_thresholds  # type: ignore[attr-defined]
    if not overrides:
        return []
    comments = _profile_comments(check)
    shared = "" if comments else SHARED_PROFILES
    lines = [
        "**Hardware profile overrides**",
        "",
        "| profile | threshold | value | source |",
        "| --- | --- | --- | --- |",
    ]
    for profile, values in overrides.items():
        for name, value in values.items():
            source = comments.get((profile, name)) or shared or NO_SOURCE
            lines.append(f"| {profile} | `{name}` | {_cell(value)} | {_prose(source)} |")
    return [*lines, ""]


def _evidence(check: type) -> list[str]:
    rules = check.evidence  # type: ignore[attr-defined]
    if not rules:
        return []
    lines = ["**Evidence rules** (a value outside them makes the result `error`, never a pass)", ""]
    lines += [f"- `{name}`: {rule.what}, {rule._range_words()}" for name, rule in sorted(rules.items())]
    return [*lines, ""]


def _remedies(check: type) -> list[str]:
    remedies = check.presentation.remedies  # type: ignore[attr-defined]
    if not remedies:
        return ["**Remedy**: read the result's evidence, fix the node, then re-run (the default).", ""]
    lines = ["**Remedies** (the triage view)", ""]
    for remedy in remedies:
        names = ", ".join(f"`{n}`" for n in remedy.names) or "any other failure"
        lines.append(f"- {names} ({remedy.cause}): {remedy.action}")
    return [*lines, ""]


def _this_checkout() -> None:
    """Puts the checkout being documented ahead of whatever an installed copy maps `checks` to
    (mkdocs restores sys.path after loading a hook, so this runs when the page is made)."""
    if sys.path[:1] != [str(REPO)]:
        sys.path.insert(0, str(REPO))


def checks_reference() -> str:
    _this_checkout()
    import checks
    from checks.core.base import GroupCheck

    assert Path(checks.__file__).is_relative_to(REPO), f"checks imported from {checks.__file__}, not {REPO}"

    lines = [
        "# Checks reference",
        "",
        "Generated from the check registry when the site is built: every check kind Kiln knows, its",
        "params (what it runs) and thresholds (what it judges) with their defaults, and the source of",
        "each default as written next to it in the code. Plans, definitions and clusters may override",
        "any of them; hardware profiles set some (listed under each check).",
        "",
    ]
    for key in sorted(checks.REGISTRY):
        check = checks.REGISTRY[key]
        scope = "group (runs once over the run's nodes)" if issubclass(check, GroupCheck) else "node"
        lines += [f"## `{key}`", "", f"**{check.name}**, scope: {scope}.", ""]
        if check.description:
            lines += [_prose(check.description), ""]
        lines += ["### Params", "", *_fields_table(check.Params, "param")]
        lines += ["### Thresholds", "", *_fields_table(check.Thresholds, "threshold")]
        lines += [*_profiles(check), *_evidence(check), *_remedies(check)]
    return "\n".join(lines) + "\n"


# --- the API reference -------------------------------------------------------------------------------


def openapi_schema() -> dict[str, Any]:
    """The schema drf-spectacular builds, in a child process: Django settings never load into mkdocs."""
    with tempfile.TemporaryDirectory() as data:
        out = Path(data) / "schema.json"
        env = {**os.environ, "KILN_ENV_FILE": "", "KILN_SECRET_KEY": "docs-build-only", "KILN_DATA_DIR": data}
        for name in ("DATABASE_URL", "CELERY_BROKER_URL"):
            env.pop(name, None)
        argv = [sys.executable, "manage.py", "spectacular", "--format", "openapi-json", "--file", str(out)]
        subprocess.run(argv, cwd=REPO, env=env, check=True, capture_output=True, timeout=300)
        schema: dict[str, Any] = json.loads(out.read_text())
    return schema


def api_reference(schema: dict[str, Any]) -> str:
    info = schema.get("info", {})
    lines = [
        "# REST API endpoints",
        "",
        "Generated from the OpenAPI schema when the site is built. A running portal serves the same",
        "schema at `/api/v1/schema/`, with Swagger UI at `/api/v1/docs/` and Redoc at `/api/v1/redoc/`.",
        "",
        info.get("description", ""),
        "",
        "| method | path | what |",
        "| --- | --- | --- |",
    ]
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            what = operation.get("summary") or operation.get("description", "").split("\n")[0]
            lines.append(f"| {method.upper()} | `{path}` | {_prose(what)} |")
    return "\n".join(lines) + "\n"


# --- mkdocs ------------------------------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(File.generated(config, CHECKS_PAGE, content=checks_reference()))
    files.append(File.generated(config, API_PAGE, content=api_reference(openapi_schema())))
    # The changelog lives at the top of the repository, where a release reader looks first.
    files.append(File.generated(config, CHANGELOG_PAGE, content=(REPO / "CHANGELOG.md").read_text()))
    return files
