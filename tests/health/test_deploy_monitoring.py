"""deploy/: the Grafana dashboard and the Prometheus rules read only what Kiln's /metrics serves.

Every PromQL expression (dashboard targets, template variables, alert rules) is tokenized and each
metric name it selects must be a family the real endpoint serves, with samples, after a seeded run;
the label names its selectors match on must be labels of that family. The rules file gets a schema
check, and promtool (Debian package `prometheus`; .ci/run installs it) checks the rules, runs their
unit tests (kiln-rules.test.yml) and checks the example prometheus.yml."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.urls import reverse

from portal.health.models import Schedule, ScheduledFire
from portal.health.services import worker_beat_record
from tests.conftest import IN_CI, REPO
from tests.health.helpers import finish
from tests.health.test_metrics import scrape
from tests.portal.helpers import add_measurement

DASHBOARD = REPO / "deploy" / "grafana" / "kiln-dashboard.json"
PROMETHEUS = REPO / "deploy" / "prometheus"
RULES = PROMETHEUS / "kiln-rules.yml"
# The dashboard's row of per-GPU panels: their series need a scrape with detail (?detail=1).
DETAIL_ROW = "Per-GPU detail"
# Series Prometheus itself makes for every scrape target, not Kiln's.
PROMETHEUS_OWN = {"up"}
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
    "offset", "atan2", "inf", "nan", "start", "end",
}  # fmt: skip
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
IDENT = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(?![\w:])(\s*\()?")
SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")
NUMBER = re.compile(r"^(?:\d|0x)")


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers not followed by `(` (functions, aggregations)
    that are not keywords, after dropping strings, label matchers `{...}`, grouping label lists
    (`by (...)`, `on (...)`...), range and subquery brackets and Grafana `$variables`."""
    text = STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = GROUPING.sub(" ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)
    text = re.sub(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?(?:ms|[smhdwy])?\b", " ", text)  # numbers and durations
    return {m.group(1) for m in IDENT.finditer(text) if not m.group(2) and m.group(1).lower() not in KEYWORDS}


def matched_labels(expr: str) -> Iterator[tuple[str, set[str]]]:
    """(metric, label names its `{...}` matchers name) per selector in the expression."""
    for selector in SELECTOR.finditer(expr):
        yield selector.group(1), set(MATCHER.findall(STRING.sub('""', selector.group(2))))


def test_the_tokenizer_finds_metrics_and_nothing_else() -> None:
    expr = (
        'sum by (cluster, state) (max by (cluster, state) (kiln_a{cluster=~"$cluster", state!="by"}))'
        " / on (cluster) group_left () kiln_b + rate(kiln_c_total[$__rate_interval]) offset 5m"
        ' > bool 1e3 and time() - kiln_d:recorded{x="y{z}"} unless label_replace(kiln_e, "a", "$1", "b", "(.*)")'
    )
    assert metric_names(expr) == {"kiln_a", "kiln_b", "kiln_c_total", "kiln_d:recorded", "kiln_e"}
    assert dict(matched_labels(expr)) == {"kiln_a": {"cluster", "state"}, "kiln_d:recorded": {"x"}}
    assert metric_names("histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m])))") == {"x_bucket"}


def dashboard_expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and query variable (label_values(expr, label) -> expr)."""
    board = json.loads(DASHBOARD.read_text())
    found = []
    panels = [p for top in board["panels"] for p in [top, *top.get("panels", [])]]
    for panel in panels:
        for target in panel.get("targets", []):
            found.append((f"panel {panel['title']!r}", target["expr"]))
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            inner = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query)
            assert inner, f"variable {variable['name']}: expected label_values(expr, label), got {query!r}"
            found.append((f"variable {variable['name']}", inner.group(1)))
    return found


def detail_panels() -> list[str]:
    """Titles of the panels in the per-GPU detail row: what a default scrape does not serve."""
    board = json.loads(DASHBOARD.read_text())
    return [p["title"] for top in board["panels"] if top["title"].startswith(DETAIL_ROW) for p in top["panels"]]


def rule_expressions() -> list[tuple[str, str]]:
    rules = yaml.safe_load(RULES.read_text())
    return [(f"rule {r.get('alert') or r.get('record')}", r["expr"]) for g in rules["groups"] for r in g["rules"]]


@pytest.fixture
def served(
    client, token, cluster, make_run, quick_plan, django_capture_on_commit_callbacks
) -> dict[str, dict[str, Any]]:
    """The real /metrics after a seeded fleet (a finished run with GPU temperatures, burn-in peaks and
    ECC counters, one failed node, a finished sweep, a worker beat): the default scrape, and the
    cluster's with per-GPU detail."""
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

    plan = TestPlan.objects.create(slug="deploy", name="Deploy monitoring plan")
    for order, slug in enumerate(["ecc-health", "dlc-temperature", "burn-in"]):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    run = make_run(cluster, plan=plan)
    for result in run.results.filter(node__isnull=False):
        for gpu in range(2):
            if result.item_key == "dlc-temperature":
                add_measurement(result, "temp_gpu_steady", value=70 + gpu, gpu=gpu, labels={"phase": "load"})
                add_measurement(result, "temp_memory_steady", value=80 + gpu, gpu=gpu, labels={"phase": "load"})
            elif result.item_key == "burn-in":
                add_measurement(result, "temp_max", value=75 + gpu, gpu=gpu)
            else:
                for counter in ("volatile_uncorrected", "aggregate_corrected"):
                    add_measurement(result, f"ecc_{counter}", value=gpu, gpu=gpu)
    schedule = Schedule.objects.create(name="nightly", cluster=cluster, plan=quick_plan, crontab="0 2 * * *")
    ScheduledFire.objects.create(schedule=schedule, fire_time=dt.datetime.now(dt.UTC), run=run)
    finish(run, {"n02": ("fail", "GPU 1 ECC")}, django_capture_on_commit_callbacks)
    worker_beat_record(name="celery@deploy-test")
    return {"default": scrape(client, token), "detail": scrape(client, token, f"?cluster={cluster.name}&detail=1")}


def _family_of(name: str, families: dict[str, Any]) -> str | None:
    """The served family a sample name belongs to: histograms' and summaries' _bucket/_sum/_count,
    counters' _total; None when Kiln serves no such family."""
    if name in families:
        return name
    for suffix, types in (("_bucket", {"histogram"}), ("_sum", {"histogram", "summary"}),
                          ("_count", {"histogram", "summary"}), ("_total", {"counter"})):  # fmt: skip
        base = name.removesuffix(suffix)
        if name.endswith(suffix) and base in families and families[base].type in types:
            return base
    return None


def test_every_metric_the_dashboard_and_rules_use_is_served(served) -> None:
    """By the default scrape, except the detail row's panels: by a scrape with detail."""
    expressions = dashboard_expressions() + rule_expressions()
    assert len(expressions) >= 15, expressions
    detail = {f"panel {title!r}" for title in detail_panels()}
    assert len(detail) >= 4, detail
    used: set[str] = set()
    for where, expr in expressions:
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        families = served["detail" if where in detail else "default"]
        for name in names - PROMETHEUS_OWN:
            family = _family_of(name, families)
            assert family is not None, f"{where}: {name} is not served by /metrics (served: {sorted(families)})"
            assert name.startswith("kiln_") and families[family].samples, f"{where}: {name} has no samples"
            used.add(family)
        for name, labels in matched_labels(expr):
            if name in PROMETHEUS_OWN:
                continue
            have = {key for sample in families[_family_of(name, families)].samples for key in sample.labels}
            assert labels <= have, f"{where}: {name} has no label {sorted(labels - have)} (it has {sorted(have)})"
    # What the issue asks the dashboard and alerts to show.
    wanted = {
        "kiln_cluster_nodes", "kiln_node_health_state", "kiln_node_check_failing", "kiln_cluster_check_failing_nodes",
        "kiln_cluster_measurement", "kiln_gpu_temp_celsius", "kiln_gpu_ecc_errors",
        "kiln_cluster_last_sweep_duration_seconds", "kiln_cluster_next_sweep_due_timestamp_seconds",
        "kiln_worker_last_heartbeat_timestamp_seconds",
    }  # fmt: skip
    assert wanted <= used, sorted(wanted - used)
    # The aggregates' selectors name a served metric, and stats the aggregate has.
    aggregated = {s.labels["metric"] for s in served["default"]["kiln_cluster_measurement"].samples}
    stats = {s.labels["stat"] for s in served["default"]["kiln_cluster_measurement"].samples}
    for where, expr in expressions:
        for metric in re.findall(r'\bmetric="([^"]+)"', expr):
            assert metric in aggregated, f"{where}: no aggregate of {metric} (have {sorted(aggregated)})"
        for chosen in re.findall(r'\bstat=~?"([^"]+)"', expr):
            assert set(chosen.split("|")) <= stats, f"{where}: stat {chosen} (have {sorted(stats)})"


def test_the_detail_rows_panels_say_they_need_detail() -> None:
    board = json.loads(DASHBOARD.read_text())
    [row] = [top for top in board["panels"] if top["title"].startswith(DETAIL_ROW)]
    assert row["type"] == "row" and row["collapsed"] is True  # not queried until opened
    for panel in row["panels"]:
        assert "?detail=1" in panel["description"] and "KILN_METRICS_DETAIL" in panel["description"], panel["title"]


def test_the_dashboard_is_an_importable_grafana_dashboard() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert 36 <= board["schemaVersion"] <= 41 and board["uid"] and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource" and variables["DS_PROMETHEUS"]["query"] == "prometheus"
    assert variables["cluster"]["type"] == "query" and "label_values(" in variables["cluster"]["definition"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel["title"]
        assert panel["targets"] and all(t["datasource"]["uid"] == "${DS_PROMETHEUS}" for t in panel["targets"])
        assert "$cluster" in " ".join(t["expr"] for t in panel["targets"]) or "worker" in panel["title"]


def test_the_rules_file_has_the_shape_prometheus_reads() -> None:
    document = yaml.safe_load(RULES.read_text())
    assert set(document) == {"groups"} and document["groups"]
    alerts = set()
    for group in document["groups"]:
        assert set(group) <= {"name", "interval", "rules", "limit"} and group["name"] and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}, rule
            assert isinstance(rule["alert"], str) and re.fullmatch(r"[A-Za-z_]\w*", rule["alert"])
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            assert re.fullmatch(r"(\d+[smhdw])+", rule["for"]), rule["alert"]
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
            alerts.add(rule["alert"])
    assert {"KilnNodeFailed", "KilnSweepMissed", "KilnWorkerDown"} <= alerts


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if IN_CI:
            pytest.fail("promtool is missing: .ci/run installs the Debian package `prometheus`")
        pytest.skip("promtool is not installed (apt-get install --no-install-recommends prometheus)")
    return found


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    promtool = _promtool()
    checked = _run([promtool, "check", "rules", RULES.name], PROMETHEUS)
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr
    tested = _run([promtool, "test", "rules", "kiln-rules.test.yml"], PROMETHEUS)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_promtool_accepts_the_example_scrape_config(tmp_path: Path) -> None:
    """--syntax-only: the token file it names is the deployment's, not in the repository."""
    promtool = _promtool()
    checked = _run([promtool, "check", "config", "--syntax-only", "prometheus.yml"], PROMETHEUS)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    assert config["rule_files"] == [RULES.name]
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "kiln"]  # the job KilnMetricsDown names
    assert job["metrics_path"] == "/metrics" and job["authorization"]["type"] == "Bearer"
    assert job["authorization"]["credentials_file"]


def test_promtool_parses_every_dashboard_expression(tmp_path: Path) -> None:
    """Grafana sends these to Prometheus with its variables filled in: as recording rules, promtool
    parses each (a typo in a panel's PromQL fails here, not on someone's screen)."""
    promtool = _promtool()
    fill = {"$__rate_interval": "5m", "$__interval": "1m", "$cluster": ".*", "$node": ".*"}
    rules = []
    for i, (_, expr) in enumerate(dashboard_expressions()):
        for variable, value in fill.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, expr
        rules.append({"record": f"kiln:dashboard_expression_{i}", "expr": expr})
    (tmp_path / "dashboard-rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = _run([promtool, "check", "rules", "dashboard-rules.yml"], tmp_path)
    assert checked.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in checked.stdout, (
        checked.stdout + checked.stderr
    )


def test_promtool_accepts_what_metrics_serves(served, client, token) -> None:
    """`promtool check metrics` parses the exposition and lints it (names, help, label names a
    summary or histogram reserves), by default and with detail."""
    promtool = _promtool()
    for query in ("", "?cluster=c1&detail=1"):
        response = client.get(reverse("health:metrics") + query, HTTP_AUTHORIZATION=f"Bearer {token}")
        text = b"".join(response.streaming_content)
        checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=120)
        assert checked.returncode == 0, (query, checked.stdout + checked.stderr)
