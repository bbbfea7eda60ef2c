"""Node import of strings the database cannot hold (JSON's \\u0000, a lone surrogate \\ud800) or a
terminal should not print (\\u001b): refused with the item and field named, by the parsers, the page
and the command, and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import execute_from_command_line
from django.urls import reverse

from portal.inventory import importers
from portal.inventory.importers import ImportFormatError
from portal.inventory.models import Cluster

pytestmark = pytest.mark.django_db


def k8s(*, name: str = "gpu1", address: str = "10.0.0.1", pool: str = "h100") -> str:
    node = {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"cloud.google.com/gke-nodepool": pool}},
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "addresses": [{"type": "InternalIP", "address": address}],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return json.dumps({"kind": "List", "items": [node]})  # ensure_ascii: escapes, as kubectl may


def slurm(*, name: str = "gpu1", address: str = "10.0.0.1", partition: str = "batch", reason: str = "") -> str:
    node = {"name": name, "address": address, "gres": "gpu:h100:8", "partitions": [partition], "state": ["IDLE"]}
    return json.dumps({"nodes": [node | {"reason": reason}]})


CASES = [
    ("k8s", k8s(pool="h100\x1b[31m"), "items[0]: group holds the control character U+001B"),
    ("k8s", k8s(address="10.0.0.1\x00"), "items[0]: address holds the control character U+0000"),
    ("k8s", k8s(name="gpu\ud8001"), "items[0].metadata: name holds a lone surrogate (U+D800)"),
    ("slurm-json", slurm(partition="batch\x00"), "nodes[0]: partitions holds the control character U+0000"),
    ("slurm-json", slurm(partition="b\x1b]0;x\x07"), "nodes[0]: partitions holds the control character U+001B"),
    ("slurm-json", slurm(address="\ud800"), "nodes[0]: address holds a lone surrogate (U+D800)"),
    ("slurm-json", slurm(reason="bad\ud800psu"), "nodes[0]: reason holds a lone surrogate (U+D800)"),
    ("csv", "hostname,address,group\ngpu1,10.0.0.1,g\x1b[2J\n", "line 2: group holds the control character U+001B"),
]


@pytest.mark.parametrize(("fmt", "text", "message"), CASES)
def test_the_parsers_refuse_and_name_the_field(fmt: str, text: str, message: str) -> None:
    with pytest.raises(ImportFormatError) as refused:
        importers.parse(fmt, text.encode("utf-8", "surrogatepass"))
    assert message in str(refused.value)


def test_the_page_refuses_it_and_writes_nothing(client, make_user) -> None:
    c1 = Cluster.objects.create(name="c1")
    client.force_login(make_user("otto", "operator"))
    url = reverse("inventory:node_import", args=["c1"])
    for fmt, text, message in CASES:
        upload = SimpleUploadedFile("nodes.json", text.encode("utf-8", "surrogatepass"))
        response = client.post(url, {"format": fmt, "file": upload})
        page = response.content.decode()
        assert response.status_code == 200 and "Import refused, nothing was imported" in page, (fmt, text)
        assert message in page and 'name="apply"' not in page
        # The apply step posts the text itself back: the same refusal, not a server error.
        response = client.post(url, {"apply": "1", "format": fmt, "text": text})
        assert response.status_code in (200, 400) and not c1.nodes.exists()


def test_the_command_refuses_it_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    c1 = Cluster.objects.create(name="c1")
    # run_from_argv closes the database connections when it ends: the test's transaction needs its own.
    monkeypatch.setattr("django.core.management.base.connections.close_all", lambda: None)
    for fmt, text, message in CASES:
        path = tmp_path / "nodes"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        with pytest.raises(SystemExit) as exited:
            execute_from_command_line(["manage.py", "kiln_nodes", "import", "c1", str(path), "--format", fmt])
        err = capsys.readouterr().err
        assert exited.value.code == 1 and message in err and "nothing was imported" in err
        assert "Traceback" not in err
    assert not c1.nodes.exists()
