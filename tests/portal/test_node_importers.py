"""The node importers (portal/inventory/importers): each format read from its real output, values
pinned; tolerant of absent fields, clear about malformed input (line or item named)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from portal.inventory import importers
from portal.inventory.importers import ImportFormatError, k8s, netbox, slurm
from portal.inventory.importers.plan import Action, make_plan
from portal.inventory.importers.records import NodeRecord

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCONTROL = FIXTURES / "slurm-nodes" / "scontrol-show-node-h100x8-mixed-23.11.11.txt"
SLURM_JSON = FIXTURES / "slurm-nodes" / "slurmrestd-25.11.0-v0.0.44-nodes-mixed-cluster.json"
KUBECTL = FIXTURES / "k8s-nodes" / "kubectl-get-nodes-json-rke2-vgpu-a16-4q.json"
H100_LABELS = FIXTURES / "k8s-nodes" / "node-labels-h100-supermicro-gpu-operator-mig-single.json"
NETBOX_REAL = FIXTURES / "netbox-devices" / "netbox-3.6-devices-export-chr-routers.csv"
NETBOX_GPUS = FIXTURES / "netbox-devices" / "netbox-4-gpu-devices-constructed.csv"


def by_name(records: list[NodeRecord]) -> dict[str, NodeRecord]:
    return {r.hostname: r for r in records}


# --- Slurm --------------------------------------------------------------------------------------


def test_it_reads_scontrol_show_node() -> None:
    (node,) = importers.parse("slurm", SCONTROL.read_bytes())

    assert node.hostname == "hgpn01" and node.where == "line 1"
    # NodeAddr is the node name: the address stays empty (SSH uses the hostname).
    assert node.fields == {"address": "", "group": "dev", "expected_gpus": 8}
    assert (node.state, node.gpu_product, node.skip_reason) == ("MIXED", "H100", "")
    assert node.warnings == (
        "hgpn01 is MIXED in Slurm: jobs run on part of it: checks will compete with them and may disturb them",
    )


def test_it_reads_the_one_line_form_of_scontrol() -> None:
    one_line = " ".join(line.strip() for line in SCONTROL.read_text().splitlines())
    text = one_line.replace("NodeName=hgpn01", "NodeName=hgpn02").replace("NodeAddr=hgpn01", "NodeAddr=10.1.0.2")
    records = slurm.parse_scontrol(one_line + "\n" + text + "\n")

    assert [(r.hostname, r.fields["address"], r.fields["expected_gpus"]) for r in records] == [
        ("hgpn01", "", 8),
        ("hgpn02", "10.1.0.2", 8),
    ]


def test_it_reads_slurmrestd_nodes_and_skips_the_cpu_nodes() -> None:
    records = by_name(importers.parse("slurm-json", SLURM_JSON.read_bytes()))

    assert sorted(records) == ["cn1", "cn2", "cn3", "cn4", "gpu1", "gpu2", "gpu3", "gpu4"]
    gpus = [r for r in records.values() if not r.skip_reason]
    assert [r.hostname for r in gpus] == ["gpu1", "gpu2", "gpu3", "gpu4"]
    assert all(r.fields == {"address": "", "group": "gpu", "expected_gpus": 4} for r in gpus)
    assert [r.gpu_product for r in gpus] == ["h100", "h100", "", ""]
    assert records["cn1"].state == "IDLE+DRAIN" and records["cn2"].state == "DOWN"
    assert records["cn1"].skip_reason == "no GPU in Slurm's Gres (empty): not a GPU node"


def test_it_warns_about_a_drained_gpu_node_and_names_the_partition_it_took() -> None:
    data = json.loads(SLURM_JSON.read_text())
    gpu1 = next(n for n in data["nodes"] if n["name"] == "gpu1")
    gpu1.update(state=["IDLE", "DRAIN"], reason="ECC memory error", partitions=["gpu", "all"], address="10.0.0.1")

    record = by_name(slurm.parse_json(json.dumps(data)))["gpu1"]

    assert record.fields == {"address": "10.0.0.1", "group": "gpu", "expected_gpus": 4}
    assert record.warnings == (
        "gpu1 is IDLE+DRAIN in Slurm (ECC memory error): checks will compete with nothing but it may be broken",
        "gpu1 is in partitions gpu,all: group set to the first, gpu",
    )


@pytest.mark.parametrize(
    ("gres", "expected"),
    [
        ("gpu:H100:8(S:0-1)", (8, "H100")),
        ("gpu:h100:4", (4, "h100")),
        ("gpu:4", (4, "")),
        ("gpu:a100:2(S:0),gpu:v100:2(S:1)", (4, "a100,v100")),
        ("shard:h100:64,gpu:h100:8(S:0-1)", (8, "h100")),
        ("gpu", (1, "")),
        ("", (0, "")),
        ("(null)", (0, "")),
    ],
)
def test_it_counts_gpus_in_gres(gres: str, expected: tuple[int, str]) -> None:
    assert slurm.gres_gpus(gres) == expected


# --- Kubernetes -----------------------------------------------------------------------------------


def test_it_reads_kubectl_get_nodes() -> None:
    (node,) = importers.parse("k8s", KUBECTL.read_bytes())

    assert node.hostname == "nori" and node.where == "items[0]"
    assert node.fields == {"address": "0.202.61.70", "expected_gpus": 1}
    assert (node.state, node.gpu_product, node.driver) == ("Ready", "NVIDIA-A16-4Q", "550.90.07")
    assert node.warnings == () and node.skip_reason == ""


def test_it_reads_product_and_driver_from_gpu_feature_discovery_labels() -> None:
    labels = json.loads(H100_LABELS.read_text())
    assert k8s.gpu_labels(labels) == ("NVIDIA-H100-80GB-HBM3", "550.54.15", 1)
    # Older GFD releases label only cuda.driver.major/minor/rev.
    older = {k: v for k, v in labels.items() if not k.startswith("nvidia.com/cuda.driver-version")}
    assert k8s.gpu_labels(older) == ("NVIDIA-H100-80GB-HBM3", "550.54.15", 1)
    assert k8s.gpu_labels({}) == ("", "", None)


def test_it_warns_about_cordoned_and_not_ready_nodes_and_takes_the_node_pool_as_group() -> None:
    data = json.loads(KUBECTL.read_text())
    node = data["items"][0]
    node["spec"]["unschedulable"] = True
    node["metadata"]["labels"]["cloud.google.com/gke-nodepool"] = "h100-pool"
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    ready.update(status="Unknown", message="Kubelet stopped posting node status.")

    (record,) = k8s.parse(json.dumps(data))

    assert record.fields["group"] == "h100-pool"
    assert record.state == "NotReady,SchedulingDisabled"
    assert record.warnings == (
        "nori is NotReady in Kubernetes (Kubelet stopped posting node status.): it may be unreachable or broken",
        "nori is cordoned in Kubernetes: no new pods, but running pods will compete with checks",
    )


def test_it_reads_one_node_and_skips_nodes_without_gpus() -> None:
    node = json.loads(KUBECTL.read_text())["items"][0]
    node["kind"] = "Node"
    del node["status"]["capacity"]["nvidia.com/gpu"]
    node["metadata"]["labels"] = {}

    (record,) = k8s.parse(json.dumps(node))

    assert record.where == "the Node" and "expected_gpus" not in record.fields
    assert record.skip_reason.startswith("no nvidia.com/gpu capacity")


# --- NetBox -----------------------------------------------------------------------------------------


def test_it_reads_a_real_netbox_export() -> None:
    records = importers.parse("netbox", NETBOX_REAL.read_bytes())

    assert [(r.hostname, r.where, r.state) for r in records] == [
        ("CHR1", "line 2", "Active"),
        ("CHR2", "line 3", "Active"),
    ]
    # Every Kiln column is empty in this export: nothing is set, nothing would be blanked.
    assert all(r.fields == {} and r.warnings == () for r in records)


def test_it_reads_netbox_racks_positions_serials_and_addresses() -> None:
    records = importers.parse("netbox", NETBOX_GPUS.read_bytes())

    first = records[0]
    assert first.hostname == "dgx-h100-001"
    assert first.fields == {"rack": "B07", "position": "4", "serial": "1561223000101", "address": "10.20.7.11"}
    assert "address" not in records[3].fields  # no IP in NetBox: Kiln's address is left alone
    assert records[2].warnings == ("dgx-h100-003 is Failed in NetBox: check that it is meant to be tested",)
    assert (records[4].hostname, records[4].skip_reason[:17]) == ("", "an unnamed device")


def test_it_reads_a_semicolon_delimited_netbox_export() -> None:
    text = "Name;Status;Rack;Position (U);IPv6 Address\ngpu01;Active;R1;12.0;fd00::1/64\n"
    (record,) = netbox.parse(text)
    assert record.fields == {"rack": "R1", "position": "12", "address": "fd00::1"}


# --- malformed input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "data", "message"),
    [
        ("slurm", KUBECTL.read_bytes(), r"line 1: not `scontrol show node` output"),
        ("slurm-json", SCONTROL.read_bytes(), r"not Slurm JSON: Expecting value at line 1, column 1"),
        ("slurm-json", SLURM_JSON.read_bytes()[:5000], r"not Slurm JSON: .* \(the file looks truncated\)"),
        ("slurm-json", KUBECTL.read_bytes(), r'no "nodes" list'),
        ("slurm-json", b'{"nodes": [{"address": "x"}]}', r"nodes\[0\]: no name"),
        ("slurm-json", b'{"nodes": [{"name": "gpu1", "partitions": "gpu"}, 3]}', r"nodes\[1\]: expected an object"),
        ("k8s", SLURM_JSON.read_bytes(), r"expected a Node or a List of Nodes"),
        ("k8s", b'{"kind": "List", "items": [{"kind": "Pod"}]}', r"items\[0\]: a Pod, not a Node"),
        ("netbox", SCONTROL.read_bytes(), r"line 1: no 'Name' column"),
        ("netbox", b"Name,Status\ngpu01,Active\n", r"none of the columns Kiln reads"),
        ("netbox", b"Name,Rack\ngpu01,R1,extra\n", r"line 2: more cells than the header"),
        ("csv", NETBOX_GPUS.read_bytes(), r"CSV needs a header row with a 'hostname' column"),
        ("k8s", b"\x89PNG\r\n\x1a\n" + bytes(range(256)), r"line 1: not UTF-8 text \(byte 0\): is it a binary file"),
        ("slurm", b"NodeName=gpu1 Gres=gpu:8\x00\x00", r"line 1: a NUL byte"),
        ("slurm", b"  \n\n", r"the file is empty"),
        ("slurm", b"NodeName=gpu;reboot Gres=gpu:8\n", r"line 1 \(gpu;reboot\): hostname: not a valid hostname"),
        ("slurm", b"NodeName=gpu1 Gres=gpu:8\nNodeName=gpu1 Gres=gpu:8\n", r"line 2: gpu1 appears twice"),
        ("slurm", b"Gres=gpu:8\n", r"line 1: expected NodeName= before Gres="),
        ("yaml", b"x", r"unknown format 'yaml'"),
    ],
)
def test_it_refuses_malformed_input_with_context(fmt: str, data: bytes, message: str) -> None:
    with pytest.raises(ImportFormatError, match=message):
        importers.parse(fmt, data)


def test_it_refuses_a_non_numeric_gpu_capacity() -> None:
    data = json.loads(KUBECTL.read_text())
    data["items"][0]["status"]["capacity"]["nvidia.com/gpu"] = "eight"
    with pytest.raises(ImportFormatError, match=r"items\[0\]: status.capacity\['nvidia.com/gpu'\] 'eight'"):
        k8s.parse(json.dumps(data))


def test_it_caps_the_file_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importers, "MAX_IMPORT_BYTES", 100)
    with pytest.raises(ImportFormatError, match="over 100 bytes"):
        importers.parse("slurm", SCONTROL.read_bytes())


# --- the plan ---------------------------------------------------------------------------------------


def test_the_plan_creates_updates_keeps_and_skips() -> None:
    records = [
        NodeRecord("a", "line 1", {"rack": "R1", "expected_gpus": 8}),
        NodeRecord("b", "line 2", {"rack": "R2"}),
        NodeRecord("c", "line 3", {"rack": "R3"}),
        NodeRecord("d", "line 4", skip_reason="a CPU node"),
    ]
    existing = {"b": {"rack": "R1", "serial": "S1"}, "c": {"rack": "R3"}}

    plan = make_plan(records, existing)

    assert [c.action for c in plan.changes] == [Action.CREATE, Action.UPDATE, Action.UNCHANGED, Action.SKIP]
    assert plan.changes[1].diffs == (("rack", "R1", "R2"),)  # serial is not in the record: untouched
    assert plan.lines()[:3] == [
        "create     a: rack='R1', expected_gpus=8",
        "update     b: rack: 'R1' -> 'R2'",
        "unchanged  c",
    ]
    assert plan.summary() == "1 to create, 1 to update, 1 unchanged, 1 skipped"
