"""gpu_inventory's DMI read: the system, board and chassis serials a certificate seals per node, read
by the node-file reader's real script (checks/core/node_files.py) from a node's tree; unreadable,
absent or placeholder serials are "not reported", never a serial."""

from __future__ import annotations

import subprocess
from pathlib import Path

from checks import get_check
from checks.core.base import CommandOutput, NodeContext
from checks.core.node_files import read_files_command
from checks.gpu.inventory import DMI_DIR, DMI_LABEL, DMI_SERIALS, parse_dmi_serials


def _read(root: Path) -> str:
    command = read_files_command(DMI_DIR, tuple(DMI_SERIALS), label=DMI_LABEL, timeout=10)
    env = {"PATH": "/usr/bin:/bin", "KILN_NODE_ROOT": str(root)}
    return subprocess.run(list(command.argv), env=env, capture_output=True, text=True, check=True).stdout


def _by_name(stdout: str) -> dict[str, tuple[str, str]]:
    return {m.name: (m.text, m.labels.get("missing", "")) for m in parse_dmi_serials(stdout)}


def test_it_reads_the_serials_and_calls_a_placeholder_or_a_missing_file_not_reported(tmp_path: Path) -> None:
    dmi = tmp_path / DMI_DIR.lstrip("/")
    dmi.mkdir(parents=True)
    (dmi / "product_serial").write_text("J30231LX\n")
    (dmi / "chassis_serial").write_text("To Be Filled By O.E.M.\n")
    found = _by_name(_read(tmp_path))
    assert found["system_serial"] == ("J30231LX", "")
    assert found["board_serial"][0] == "" and "unreadable" in found["board_serial"][1]
    assert found["chassis_serial"][0] == "" and "placeholder 'To Be Filled By O.E.M.'" in found["chassis_serial"][1]


def test_a_node_without_dmi_tables_reports_no_serial(tmp_path: Path) -> None:
    found = _by_name(_read(tmp_path))  # no sys/class/dmi/id at all (a VM without SMBIOS, this very box)
    assert all(text == "" and "no DMI tables" in why for text, why in found.values())


def test_a_cut_output_is_not_reported_rather_than_an_error_of_the_inventory() -> None:
    found = _by_name(f"ok\t{DMI_DIR}\tproduct_serial\tJ30231LX\n")  # no end line
    assert all(text == "" and "cut short" in why for text, why in found.values())


def test_the_inventory_reads_dmi_beside_the_probe_and_parses_a_probe_alone_as_before() -> None:
    check = get_check("gpu_inventory")
    commands = check.commands(check.make_params({}), NodeContext(hostname="n1"))
    assert [c.label for c in commands] == ["probe.py", DMI_LABEL, "bmc fru"]
    assert all(c.read_only for c in commands)
    probe = '{"schema": 1, "source": "nvml", "gpu_count": 0, "gpus": [], "errors": []}'
    alone = check.parse([CommandOutput(commands[0], probe, "", 0)])
    assert not {m.name for m in alone} & set(DMI_SERIALS.values())
    both = check.parse([CommandOutput(commands[0], probe, "", 0), CommandOutput(commands[1], "end\t0\n", "", 0)])
    assert {m.name for m in both} >= set(DMI_SERIALS.values())
