"""A simulated node's own file tree: the files a check reads on a real node below / (sysfs).

Each node's tree is `<state file>.root/`, beside its state file, and its environment (`node_env`)
names it in KILN_NODE_ROOT; checks that read node files read below that root when it is set
(checks/core/node_files.py), and below / on a real node. `write_state` writes the healthy tree for the
node's state (`write_tree`); a test writes a fault into one node's files afterwards with
`write_node_file`, and the next `write_state` makes the node healthy again.

The tree mirrors the PCIe devices of testbed/sim/tools/lspci (the same bus ids as nvidia-smi and
fake_nvml.c): per GPU slot, the GPU at BB:00.0 and its ConnectX-7 NIC at BB+1:00.0, both Gen5 x16
(an H100 SXM5 and a ConnectX-7 are PCIe Gen5 x16 parts; an A100 SXM4 is Gen4 x16), plus the host
bridge, and the node's DMI serials (`dmi_serials`).
`missing_gpu` drops a GPU's function; `pcie_degraded_gpu` trains that GPU's link at Gen4
x8, as the NVML and nvidia-smi paths report it. Attributes are the kernel's formats
(drivers/pci/pci-sysfs.c): `vendor` "0x10de", `class` "0x030200", `current_link_speed`
"32.0 GT/s PCIe", `current_link_width` "16".
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

NODE_ROOT_ENV = "KILN_NODE_ROOT"
PCI_DEVICES = "sys/bus/pci/devices"
DMI_ID = "sys/class/dmi/id"
# The GPU slots' bus ids, as testbed/sim/nvidia-smi, fake_nvml.c and tools/lspci number them.
HGX_BUS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
GEN5, GEN4 = "32.0 GT/s PCIe", "16.0 GT/s PCIe"


def node_root(state_file: Path) -> Path:
    return Path(f"{Path(state_file).resolve()}.root")


def _slots(state: dict[str, str], key: str) -> set[int]:
    return {int(p) for p in state.get(key, "").replace(" ", "").split(",") if p.isdigit()}


def _device(vendor: str, device: str, cls: str, speed: str, width: int, max_speed: str) -> dict[str, str]:
    return {
        "vendor": vendor,
        "device": device,
        "class": cls,
        "current_link_speed": speed,
        "current_link_width": str(width),
        "max_link_speed": max_speed,
        "max_link_width": "16",
    }


def pci_devices(state: dict[str, str]) -> dict[str, dict[str, str]]:
    """Bus id ("0000:18:00.0") -> attribute -> content, for the node's state."""
    a100 = "A100" in state.get("model", "")
    gpu_id, gpu_max = ("0x20b2", GEN4) if a100 else ("0x2330", GEN5)
    count = max(0, int(state.get("gpus", "8") or 8))
    missing, degraded = _slots(state, "missing_gpu"), _slots(state, "pcie_degraded_gpu")
    host = {"vendor": "0x8086", "device": "0x09a2", "class": "0x060000"}
    out: dict[str, dict[str, str]] = {"0000:00:00.0": host}
    for slot in range(min(count, len(HGX_BUS))):
        bus = HGX_BUS[slot]
        out[f"0000:{bus + 1:02x}:00.0"] = _device("0x15b3", "0x1021", "0x020700", GEN5, 16, GEN5)
        if slot in missing:
            continue
        speed, width = (GEN4, 8) if slot in degraded else (gpu_max, 16)
        out[f"0000:{bus:02x}:00.0"] = _device("0x10de", gpu_id, "0x030200", speed, width, gpu_max)
    return out


def dmi_serials(state: dict[str, str]) -> dict[str, str]:
    """The node's DMI serials (/sys/class/dmi/id), seeded by its name: the system and board carry
    their own, the chassis the placeholder many boards' firmware leaves there."""
    seed = hashlib.sha256(state.get("node", "").encode()).hexdigest().upper()
    return {"product_serial": f"SIM{seed[:9]}", "board_serial": f"BRD{seed[9:18]}", "chassis_serial": "Default string"}


def write_tree(state_file: Path, state: dict[str, str]) -> Path:
    """Write the node's healthy tree for `state` in place of the one there (faults written into it
    by a test are gone). Built beside it and swapped in: a reader sees the old tree or the new one
    (or, for an instant between the two renames, none: a read that fails is an `error`, not a pass)."""
    root = node_root(state_file)
    root.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    for bus_id, attributes in pci_devices(state).items():
        folder = fresh / PCI_DEVICES / bus_id
        folder.mkdir(parents=True)
        for name, text in attributes.items():
            (folder / name).write_text(text + "\n")
    (fresh / DMI_ID).mkdir(parents=True)
    for name, text in dmi_serials(state).items():
        (fresh / DMI_ID / name).write_text(text + "\n")
    for folder in [fresh, *fresh.rglob("*")]:
        os.chmod(folder, 0o755 if folder.is_dir() else 0o644)  # sshd-spawned node shells may run as another user
    old = root.with_name(f".{root.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if root.exists():
        os.replace(root, old)
    os.replace(fresh, root)
    shutil.rmtree(old, ignore_errors=True)
    return root


def write_node_file(state_file: Path, path: str, text: str | None) -> Path:
    """Write `text` (a line) into the node's file at absolute `path` ("/sys/bus/pci/devices/
    0000:18:00.0/current_link_width"); None removes it (an attribute the kernel does not offer)."""
    relative = Path(path.lstrip("/"))
    if not path.startswith("/") or ".." in relative.parts:
        raise ValueError(f"not an absolute path on the node: {path!r}")
    target = node_root(state_file) / relative
    if text is None:
        target.unlink(missing_ok=True)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text + "\n")
    os.chmod(target, 0o644)
    return target
