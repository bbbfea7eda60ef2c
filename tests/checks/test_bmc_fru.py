"""The power supplies' serials from the BMC's FRU inventory (`ipmitool fru print`), on a real capture
and on the simulator; a BMC that did not answer reads as "not read", never as no power supplies."""

from __future__ import annotations

import subprocess
from pathlib import Path

from checks.gpu.bmc_fru import EXIT_MARK, fru_command, fru_exit, parse_fru_psus, psu_measurements
from tests.checks.probe_docs import REPO

FIXTURE = REPO / "tests/fixtures/ipmitool-fru/ipmitool_fru_print_sun_x4270.txt"


def test_it_reads_the_board_serial_of_each_power_supply_of_the_real_capture() -> None:
    found = {m.labels["psu"]: m.text for m in parse_fru_psus(FIXTURE.read_text())}
    # PS0 and PS1 fill only their board area; the other FRUs (boards, DIMMs, empty bays) are no PSUs.
    assert found == {"PS0": "9038BAO-0926A30L9J", "PS1": "9008BAO-0924A30JG9"}


def test_it_prefers_the_product_serial_skips_absent_bays_and_keeps_a_blank_one_as_not_reported() -> None:
    text = (
        "FRU Device Description : PSU1_FRU (ID 215)\n Product Serial        : JJLT2311000203\n"
        " Board Serial          : R4028-1\n\n"
        "FRU Device Description : PSU2 (ID 12)\n Device not present (Timeout)\n\n"
        "FRU Device Description : Power Supply 3 (ID 13)\n Product Serial        : N/A\n\n"
        "FRU Device Description : FAN3_FRU (ID 159)\n Board Serial          : R4028-G0022\n"
    )
    found = {m.labels["psu"]: (m.text, m.labels.get("missing", "")) for m in parse_fru_psus(text)}
    assert found == {
        "PSU1_FRU": ("JJLT2311000203", ""),
        "Power Supply 3": ("", "the BMC lists Power Supply 3 with no serial ('N/A')"),
    }


def test_a_failed_timed_out_or_cut_read_records_no_power_supply() -> None:
    listing = FIXTURE.read_text()
    assert psu_measurements(listing + f"{EXIT_MARK} 0\n")
    assert psu_measurements(f"{EXIT_MARK} 1\n") == []  # no /dev/ipmi0
    assert psu_measurements(listing + f"{EXIT_MARK} 124\n") == []  # the BMC did not answer in time
    assert psu_measurements(listing) == []  # cut before the exit line
    assert fru_exit("") is None


def test_the_command_bounds_ipmitool_and_always_exits_0(tmp_path: Path) -> None:
    command = fru_command()
    assert "timeout -k 2 20 ipmitool fru print" in command.argv[2] and command.read_only
    assert command.timeout == 25.0  # the BMC's 20 s, the kill grace and the shell's slack
    env = {"PATH": str(tmp_path)}  # no ipmitool here: the shell still exits 0, with the code
    for tool in ("sh", "timeout"):
        (tmp_path / tool).symlink_to(subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip())
    out = subprocess.run(list(command.argv), env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0 and fru_exit(out.stdout) == 127


def test_the_simulated_bmc_lists_six_supplies_and_a_swapped_one_has_another_serial(tmp_path: Path) -> None:
    from testbed.sim import build_simulator, node_env, write_state

    sim = build_simulator(tmp_path / "sim")
    state = tmp_path / "gpu01" / "state"
    state.parent.mkdir()

    def serials(**faults: object) -> dict[str, str]:
        write_state(state, node="gpu01", **faults)  # type: ignore[arg-type]
        command = fru_command()
        env = {"PATH": "/usr/bin:/bin", **node_env(sim, state)}
        out = subprocess.run(list(command.argv), env=env, capture_output=True, text=True, check=True)
        return {m.labels["psu"]: m.text for m in psu_measurements(out.stdout)}

    before, after = serials(), serials(swap_psu=2)
    assert list(before) == [f"PSU{i}" for i in range(1, 7)]
    assert [psu for psu in before if before[psu] != after[psu]] == ["PSU2"]
