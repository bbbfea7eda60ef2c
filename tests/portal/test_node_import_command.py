"""`kiln_nodes import CLUSTER FILE --format ... [--dry-run]` and the operator's import page: the dry
run prints the plan and writes nothing, the apply is all or nothing and idempotent, errors exit
non-zero with the reason."""

from __future__ import annotations

import io
import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command, execute_from_command_line
from django.urls import reverse

from portal.inventory.models import Cluster, Node
from tests.portal.test_node_importers import KUBECTL, NETBOX_GPUS, SCONTROL, SLURM_JSON

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("kiln_nodes", "import", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def c1(db) -> Cluster:
    return Cluster.objects.create(name="c1")


def test_a_dry_run_prints_the_plan_and_writes_nothing(c1: Cluster) -> None:
    Node.objects.create(cluster=c1, hostname="gpu1", group="old", rack="R9", expected_gpus=4)

    output = run("c1", str(SLURM_JSON), "--format", "slurm-json", "--dry-run")

    assert "update     gpu1: group: 'old' -> 'gpu'  [IDLE; h100]" in output
    assert "create     gpu3: address='', group='gpu', expected_gpus=4  [IDLE]" not in output  # '' is not shown
    assert "create     gpu3: group='gpu', expected_gpus=4  [IDLE]" in output
    assert "skip       cn1 (nodes[0]): no GPU in Slurm's Gres (empty): not a GPU node  [IDLE+DRAIN]" in output
    assert output.rstrip().endswith("dry run, nothing written: 3 to create, 1 to update, 0 unchanged, 4 skipped")
    assert list(c1.nodes.values_list("hostname", "group")) == [("gpu1", "old")]


@pytest.mark.parametrize(
    ("fmt", "path", "hosts"),
    [
        ("slurm", SCONTROL, {"hgpn01": ("", "dev", 8, "")}),
        ("slurm-json", SLURM_JSON, {f"gpu{i}": ("", "gpu", 4, "") for i in range(1, 5)}),
        ("k8s", KUBECTL, {"nori": ("0.202.61.70", "", 1, "")}),
        ("netbox", NETBOX_GPUS, {f"dgx-h100-00{i}": (a, "", None, "B07" if i < 4 else "B08") for i, a in
                                 [(1, "10.20.7.11"), (2, "10.20.7.12"), (3, "10.20.7.13"), (4, "")]}),
    ],
)  # fmt: skip
def test_an_apply_writes_the_plan_and_a_second_one_changes_nothing(
    c1: Cluster, fmt: str, path: Path, hosts: dict[str, tuple[str, str, int | None, str]]
) -> None:
    first = run("c1", str(path), "--format", fmt)
    again = run("c1", str(path), "--format", fmt)

    nodes = {n.hostname: (n.address, n.group, n.expected_gpus, n.rack) for n in c1.nodes.all()}
    assert nodes == hosts
    assert f"c1: {len(hosts)} to create, 0 to update, 0 unchanged" in first
    assert f"added {len(hosts)}:" in first
    assert f"c1: 0 to create, 0 to update, {len(hosts)} unchanged" in again
    assert "added" not in again and "updated" not in again


def test_an_import_keeps_the_fields_its_source_does_not_know(c1: Cluster) -> None:
    Node.objects.create(cluster=c1, hostname="dgx-h100-001", serial="OLD", expected_gpus=8, group="rail1")
    run("c1", str(NETBOX_GPUS), "--format", "netbox")
    node = c1.nodes.get(hostname="dgx-h100-001")
    assert (node.serial, node.rack, node.expected_gpus, node.group) == ("1561223000101", "B07", 8, "rail1")


def test_an_invalid_node_stops_the_whole_import(c1: Cluster, tmp_path: Path) -> None:
    data = json.loads(SLURM_JSON.read_text())
    data["nodes"][6]["address"] = "-oProxyCommand=id"
    bad = tmp_path / "nodes.json"
    bad.write_text(json.dumps(data))

    with pytest.raises(CommandError, match=r"nodes\[6\] \(gpu3\): address: .*; nothing was imported"):
        run("c1", str(bad), "--format", "slurm-json")

    assert not c1.nodes.exists()


def test_the_default_format_is_kiln_csv(c1: Cluster, tmp_path: Path) -> None:
    csv_file = tmp_path / "nodes.csv"
    csv_file.write_text("hostname,address,expected_gpus\ngpu001,10.0.0.1,8\n")
    assert "create     gpu001: address='10.0.0.1', expected_gpus=8" in run("c1", str(csv_file), "--dry-run")
    assert not c1.nodes.exists()
    with pytest.raises(CommandError, match="CSV needs a header row"):
        run("c1", str(SLURM_JSON))


def test_the_command_exits_non_zero_with_the_reason(
    c1: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # run_from_argv closes the database connections when it ends: the test's transaction needs its own.
    monkeypatch.setattr("django.core.management.base.connections.close_all", lambda: None)
    argv = ["manage.py", "kiln_nodes", "import", "c1"]
    execute_from_command_line([*argv, str(KUBECTL), "--format", "k8s", "--dry-run"])  # exit 0: returns
    assert "1 to create" in capsys.readouterr().out

    for args, message in [
        ([str(KUBECTL), "--format", "slurm"], "line 1: not `scontrol show node` output"),
        ([str(KUBECTL) + ".absent", "--format", "k8s"], "cannot read"),
    ]:
        with pytest.raises(SystemExit) as exited:
            execute_from_command_line([*argv, *args])
        assert exited.value.code == 1
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        execute_from_command_line([*argv, str(KUBECTL), "--format", "yaml"])
    assert exited.value.code == 2  # argparse: not one of the formats
    assert not c1.nodes.exists()


# --- the web page --------------------------------------------------------------------------------


def upload(client, cluster: Cluster, fmt: str, path: Path):
    url = reverse("inventory:node_import", args=[cluster.name])
    return client.post(url, {"format": fmt, "file": SimpleUploadedFile(path.name, path.read_bytes())})


def test_viewers_cannot_import(client, make_user, c1: Cluster) -> None:
    client.force_login(make_user("vera", "viewer"))
    assert client.get(reverse("inventory:node_import", args=["c1"])).status_code == 403
    assert upload(client, c1, "slurm-json", SLURM_JSON).status_code == 403
    assert "Import nodes" not in client.get(reverse("inventory:cluster_detail", args=["c1"])).content.decode()
    assert not c1.nodes.exists()


def test_an_operator_previews_then_applies(client, make_user, c1: Cluster) -> None:
    client.force_login(make_user("otto", "operator"))
    assert "Import nodes" in client.get(reverse("inventory:cluster_detail", args=["c1"])).content.decode()

    preview = upload(client, c1, "slurm-json", SLURM_JSON)

    page = preview.content.decode()
    assert preview.status_code == 200 and "Preview: 4 to create, 0 to update, 0 unchanged, 4 skipped" in page
    assert "gpu1" in page and "no GPU in Slurm&#x27;s Gres" in page and 'name="apply"' in page
    assert not c1.nodes.exists()

    apply_form = preview.context["apply_form"]
    response = client.post(
        reverse("inventory:node_import", args=["c1"]),
        {"apply": "1", "format": apply_form.initial["format"], "text": apply_form.initial["text"]},
    )

    assert response.status_code == 302 and response["Location"] == reverse("inventory:cluster_detail", args=["c1"])
    assert sorted(c1.nodes.values_list("hostname", flat=True)) == ["gpu1", "gpu2", "gpu3", "gpu4"]
    again = upload(client, c1, "slurm-json", SLURM_JSON).content.decode()
    assert "0 to create, 0 to update, 4 unchanged" in again and "Nothing to write." in again


def test_the_page_refuses_a_file_of_the_wrong_format(client, make_user, c1: Cluster) -> None:
    client.force_login(make_user("otto", "operator"))
    page = upload(client, c1, "k8s", NETBOX_GPUS).content.decode()
    assert "Import refused, nothing was imported: not Kubernetes JSON" in page and 'name="apply"' not in page
    assert not c1.nodes.exists()


def test_the_page_sends_large_files_to_the_command(client, make_user, c1: Cluster, settings) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 70_000  # the fixture (21 KB) + 64 KiB is over it
    client.force_login(make_user("otto", "operator"))
    page = upload(client, c1, "slurm-json", SLURM_JSON).content.decode()
    assert "Preview: 4 to create" in page and "too large to apply from the browser" in page
    assert 'name="apply"' not in page


def test_the_command_reads_standard_input(c1: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    class Stdin:
        buffer = io.BytesIO(SCONTROL.read_bytes())

    monkeypatch.setattr("sys.stdin", Stdin)
    assert "c1: 1 to create" in run("c1", "-", "--format", "slurm")
    assert c1.nodes.get().expected_gpus == 8
