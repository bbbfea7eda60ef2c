"""Hardware identities: sealed per node from the check kinds' declarations, and compared with what
the live nodes report (swapped, changed, missing, extra; could not tell is never a difference)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from checks import presentation_of
from portal.certificates import hardware, seal
from portal.certificates.hardware import HardwareCheck, compare_node, identities

GPU, NIC = presentation_of("gpu_inventory").hardware, presentation_of("ib_ports").hardware
FIELDS = {"GPU/serial", "GPU/uuid", "GPU/vbios", "NIC/guid", "NIC/firmware", "chassis/system serial"}


def row(name: str, text: str, gpu: int | None = None, **labels: str) -> list[Any]:
    return [name, None, text, "", gpu, "", None, labels]


def test_it_names_parts_by_the_declarations_and_keeps_a_missing_field_as_not_reported() -> None:
    rows = [
        row("gpu_serial", "1654922001203", gpu=0),
        row("gpu_uuid", "", gpu=0, missing="Not Supported"),
        row("gpu_serial", "1654922001211", gpu=11),
        row("gpu_serial", "1654922001202", gpu=2),
        row("ca_guid", "0xa088c20300e3142a", ca="mlx5_10"),
        row("ca_guid", "0xa088c20300e31400", ca="mlx5_9"),
        row("ca_firmware", "28.39.1002", ca="mlx5_9"),
        row("system_serial", "J30231LX"),
        row("port_rate", "", ca="mlx5_9"),  # not an identity
    ]
    parts = identities(rows, GPU + NIC)
    assert [(p["part"], p["key"]) for p in parts] == [
        ("chassis", ""),
        ("GPU", "0"),
        ("GPU", "2"),
        ("GPU", "11"),
        ("NIC", "mlx5_9"),
        ("NIC", "mlx5_10"),
    ]
    assert parts[1] == {"part": "GPU", "key": "0", "serial": "1654922001203", "uuid": None}
    assert parts[4] == {"part": "NIC", "key": "mlx5_9", "guid": "0xa088c20300e31400", "firmware": "28.39.1002"}


def sealed_gpu(index: int, serial: str, **more: str | None) -> dict[str, Any]:
    return {"part": "GPU", "key": str(index), "serial": serial, **more}


def test_it_tells_a_swapped_part_from_a_changed_one_a_missing_one_and_an_extra_one() -> None:
    found = HardwareCheck(cluster="c1")
    sealed = [
        sealed_gpu(0, "S0", uuid="U0"),
        sealed_gpu(1, "S1", uuid="U1"),
        sealed_gpu(2, "S2"),
        {"part": "NIC", "key": "mlx5_0", "guid": "G0", "firmware": "28.39.1002"},
    ]
    now = [
        sealed_gpu(0, "S0", uuid="U0"),
        sealed_gpu(1, "S9", uuid="U9"),
        sealed_gpu(3, "S3"),
        {"part": "NIC", "key": "mlx5_0", "guid": "G0", "firmware": "28.41.1000"},
    ]
    compare_node("n01", sealed, now, found, FIELDS)
    lines = [d.line() for d in found.differences]
    assert "n01: GPU 1 swapped: serial S1 (sealed) -> S9 (now); uuid U1 (sealed) -> U9 (now)" in lines
    assert "n01: GPU 2 missing: sealed serial S2, not found on the node now" in lines
    assert "n01: NIC mlx5_0 changed: firmware 28.39.1002 (sealed) -> 28.41.1000 (now)" in lines
    assert "n01: GPU 3 extra: serial S3 found on the node, not in the certificate" in lines
    assert len(lines) == 4 and found.parts_compared == 4
    assert found.exit_code == hardware.DIFFERS_EXIT


def test_a_field_not_reported_now_is_could_not_tell_and_one_not_sealed_is_a_note() -> None:
    found = HardwareCheck(cluster="c1")
    compare_node(
        "n01",
        [sealed_gpu(0, "S0", uuid=None), {"part": "chassis", "key": "", "system serial": "J3"}],
        [sealed_gpu(0, None, uuid="U0"), {"part": "chassis", "key": "", "system serial": "J3"}],  # type: ignore[arg-type]
        found,
        FIELDS,
    )
    assert found.differences == []
    assert found.unknown == ["n01: GPU 0 serial: sealed S0, not reported now"]
    assert found.notes == ["n01: GPU 0 uuid U0 now: not sealed (not reported at acceptance)"]
    assert found.exit_code == hardware.COULD_NOT_TELL_EXIT


def test_the_issued_certificate_seals_each_nodes_gpus_under_format_4(issued) -> None:
    payload = json.loads(issued.payload)
    assert payload["format"] == "kiln-certificate/4"
    node = next(n for n in payload["nodes"] if n["hostname"] == "n01")
    assert node["hardware"]["items"] == ["gpu-inventory"]
    assert node["hardware"]["parts"] == [
        {"part": "GPU", "key": "0", "serial": "SNn010", "uuid": "GPU-n01-0"},
        {"part": "GPU", "key": "1", "serial": "SNn011", "uuid": "GPU-n01-1"},
    ]
    summary = seal.sealed_hardware(payload)
    assert [n["hostname"] for n in summary["nodes"]] == ["n01", "n02", "n03", "n04"]
    assert list(summary["items"]) == ["gpu-inventory"]
    assert summary["items"]["gpu-inventory"]["kind"] == "gpu_inventory"


def test_it_reads_every_node_and_an_unreadable_one_is_could_not_tell(issued, monkeypatch) -> None:
    payload = {"number": "X", "format": seal.FORMAT, "cluster": {"name": "c1"}}
    payload["hardware"] = seal.sealed_hardware(json.loads(issued.payload))

    def read(node: Any, reads: list[Any]) -> tuple[list[dict[str, Any]], set[str], list[str]]:
        if node.hostname == "n02":
            return [], set(), ["unreachable: connection refused"]
        serial = "SWAPPED" if node.hostname == "n03" else f"SN{node.hostname}1"
        parts = [sealed_gpu(0, f"SN{node.hostname}0", uuid=f"GPU-{node.hostname}-0")]
        parts.append(sealed_gpu(1, serial, uuid=f"GPU-{node.hostname}-1"))
        # The BMC answers now, though the acceptance sealed no PSU: a note, not an extra part.
        parts.append({"part": "PSU", "key": "PSU1", "serial": "DTH1"})
        return parts, {"GPU/serial", "GPU/uuid", "PSU/serial"}, []

    monkeypatch.setattr(hardware, "_read_node", read)
    found = hardware.hardware_verify(payload=payload, cluster=issued.campaign.cluster)
    assert [d.line() for d in found.differences] == ["n03: GPU 1 swapped: serial SNn031 (sealed) -> SWAPPED (now)"]
    assert found.unknown == ["n02: could not tell: unreachable: connection refused"]
    assert found.nodes_compared == 3 and found.exit_code == hardware.DIFFERS_EXIT
    assert "n01: 1 PSU part(s) read now, none sealed (not read at acceptance)" in found.notes


def test_a_certificate_without_hardware_is_could_not_tell(cluster) -> None:
    payload = {"number": "KILN-1", "format": "kiln-certificate/3", "cluster": {"name": "c1"}, "hardware": {"nodes": []}}
    found = hardware.hardware_verify(payload=payload, cluster=cluster)
    assert found.exit_code == hardware.COULD_NOT_TELL_EXIT
    assert "seals no hardware identities" in found.unknown[0]


def verify(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as exit_info:
        call_command("kiln_verify", *args, stdout=out, stderr=err)
    return int(exit_info.value.code or 0), out.getvalue(), err.getvalue()


def test_kiln_verify_refuses_an_unknown_cluster_as_a_usage_error(issued, tmp_path: Path, capsys) -> None:
    path = tmp_path / "c.pdf"
    path.write_bytes(bytes(issued.pdf))
    code, _, _ = verify(str(path), "--against", "nope")
    assert code == 64 and "no cluster named 'nope'" in capsys.readouterr().err


def test_kiln_verify_compares_nothing_for_a_tampered_certificate(issued, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(hardware, "_read_node", lambda *a: pytest.fail("a tampered certificate's nodes were read"))
    data = bytearray(bytes(issued.pdf))
    at = data.index(b"GPU-n01-0") if b"GPU-n01-0" in data else len(data) // 2
    data[at] ^= 0x01
    path = tmp_path / "c.pdf"
    path.write_bytes(bytes(data))
    code, out, _ = verify(str(path), "--against", "c1", "--json")
    answer = json.loads(out)
    assert code == 1 and answer["status"] == "tampered"
    assert answer["hardware"]["could_not_tell"] == ["not compared: the certificate itself did not verify"]


def test_the_api_compares_the_hardware_for_an_operator_only(issued, users, client, monkeypatch) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    def read(node: Any, reads: list[Any]) -> tuple[list[dict[str, Any]], set[str], list[str]]:
        serial = "SWAPPED" if node.hostname == "n04" else f"SN{node.hostname}0"
        parts = [sealed_gpu(0, serial, uuid=f"GPU-{node.hostname}-0")]
        parts.append(sealed_gpu(1, f"SN{node.hostname}1", uuid=f"GPU-{node.hostname}-1"))
        return parts, {"GPU/serial", "GPU/uuid"}, []

    monkeypatch.setattr(hardware, "_read_node", read)

    def post(cluster: str) -> Any:
        upload = SimpleUploadedFile("c.pdf", bytes(issued.pdf), content_type="application/pdf")
        return client.post("/api/v1/certificates/verify-hardware/", {"pdf": upload, "cluster": cluster})

    client.force_login(users["viewer"])
    assert post("c1").status_code == 403
    client.force_login(users["operator"])
    assert post("nope").status_code == 400
    answer = post("c1").json()
    assert (answer["status"], answer["exit_code"]) == ("valid", hardware.DIFFERS_EXIT)
    texts = [d["text"] for d in answer["hardware"]["differences"]]
    assert texts == ["n04: GPU 0 swapped: serial SNn040 (sealed) -> SWAPPED (now)"]
    assert "hardware" not in answer["payload"]  # the sealed parts are compared, not echoed
