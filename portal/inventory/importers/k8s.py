"""Kubernetes nodes: `kubectl get nodes -o json` (a List) or `kubectl get node NAME -o json` (one Node).

Mapping: metadata.name -> hostname; the InternalIP of status.addresses -> address; the
nvidia.com/gpu capacity (the device plugin's count; GPU feature discovery's nvidia.com/gpu.count
label when it is absent) -> expected_gpus; the first node-pool or topology label of GROUP_LABELS
-> group. Readiness, cordoning and the GPU product and driver labels are shown, never stored.
"""

from __future__ import annotations

from typing import Any

from portal.inventory.importers.records import (
    FieldValue,
    ImportFormatError,
    NodeRecord,
    load_json,
    object_at,
    text_value,
)

GPU_RESOURCE = "nvidia.com/gpu"  # NVIDIA device plugin's extended resource
# Node-pool labels of the managed services (GKE, EKS, AKS, Karpenter), then the well-known topology
# labels; the first present names the node's group.
GROUP_LABELS = (
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "kubernetes.azure.com/agentpool",
    "karpenter.sh/nodepool",
    "topology.kubernetes.io/zone",
)


def gpu_labels(labels: dict[str, Any]) -> tuple[str, str, int | None]:
    """(product, driver version, GPU count) from GPU feature discovery's labels ('' / None when absent)."""

    def label(key: str) -> str:
        value = labels.get(key)
        return value.strip() if isinstance(value, str) else ""

    driver = label("nvidia.com/cuda.driver-version.full")
    if not driver:
        parts = [label(f"nvidia.com/cuda.driver.{p}") for p in ("major", "minor", "rev")]
        driver = ".".join(p for p in parts if p) if parts[0] else ""
    count = label("nvidia.com/gpu.count")
    return label("nvidia.com/gpu.product"), driver, int(count) if count.isdigit() else None


def _state(name: str, status: dict[str, Any], spec: dict[str, Any]) -> tuple[str, list[str]]:
    conditions = status.get("conditions") or []
    ready = next((c for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"), None)
    words, warnings = [], []
    if ready is None or ready.get("status") != "True":
        words.append("NotReady")
        why = ready.get("message") if isinstance(ready, dict) else ""
        why = " ".join(why.split()) if isinstance(why, str) else ""  # kubelet's message may span lines
        warnings.append(
            f"{name} is NotReady in Kubernetes{f' ({why})' if why else ''}: it may be unreachable or broken"
        )
    else:
        words.append("Ready")
    if spec.get("unschedulable"):
        words.append("SchedulingDisabled")
        warnings.append(f"{name} is cordoned in Kubernetes: no new pods, but running pods will compete with checks")
    return ",".join(words), warnings


def _internal_ip(status: dict[str, Any]) -> str:
    addresses = status.get("addresses") or []
    internal = [a.get("address") for a in addresses if isinstance(a, dict) and a.get("type") == "InternalIP"]
    return internal[0] if internal and isinstance(internal[0], str) else ""


def _capacity(status: dict[str, Any], *, where: str) -> int | None:
    capacity = object_at(status.get("capacity") or {}, where=f"{where}.status.capacity").get(GPU_RESOURCE)
    if capacity is not None and not str(capacity).isdigit():
        raise ImportFormatError(f"{where}: status.capacity[{GPU_RESOURCE!r}] {capacity!r} is not a whole number")
    return None if capacity is None else int(capacity)


def _node(item: Any, *, where: str) -> NodeRecord:
    node = object_at(item, where=where)
    meta = object_at(node.get("metadata") or {}, where=f"{where}.metadata")
    name = text_value(meta, "name", where=f"{where}.metadata")
    if not name:
        raise ImportFormatError(f"{where}: metadata.name is missing")
    labels = object_at(meta.get("labels") or {}, where=f"{where}.metadata.labels")
    status = object_at(node.get("status") or {}, where=f"{where}.status")
    spec = object_at(node.get("spec") or {}, where=f"{where}.spec")
    fields: dict[str, FieldValue] = {}
    address = _internal_ip(status)
    if address:
        fields["address"] = address
    product, driver, label_count = gpu_labels(labels)
    gpus = _capacity(status, where=where)
    if gpus is None:
        gpus = label_count
    if gpus:
        fields["expected_gpus"] = gpus
    group = next((labels[k] for k in GROUP_LABELS if isinstance(labels.get(k), str) and labels[k]), "")
    if group:
        fields["group"] = group[:64]
    state, warnings = _state(name, status, spec)
    return NodeRecord(
        hostname=name,
        where=where,
        fields=fields,
        state=state,
        gpu_product=product,
        driver=driver,
        warnings=tuple(warnings),
        skip_reason="" if gpus else f"no {GPU_RESOURCE} capacity: not a GPU node (or the device plugin is not running)",
    )


def parse(text: str) -> list[NodeRecord]:
    data = object_at(load_json(text, what="Kubernetes"), where="the document")
    kind = data.get("kind")
    if kind == "Node":
        return [_node(data, where="the Node")]
    items = data.get("items")
    if kind not in ("List", "NodeList", None) or not isinstance(items, list):
        raise ImportFormatError(
            f"expected a Node or a List of Nodes (kubectl get nodes -o json), found kind {kind!r}"
            + ("" if isinstance(items, list) else " without an items list")
        )
    records = []
    for index, item in enumerate(items):
        where = f"items[{index}]"
        if isinstance(item, dict) and item.get("kind") not in ("Node", None):
            raise ImportFormatError(f"{where}: a {item.get('kind')}, not a Node")
        records.append(_node(item, where=where))
    return records
