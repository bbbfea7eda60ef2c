"""The triage view (portal/runs/triage.py): lines per cause, grouping, GPU identities, exports, pages."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from checks.core.presentation import COULD_NOT_JUDGE, COULD_NOT_TELL, REINSTALL_DRIVER, RMA
from portal.runs.models import Run
from portal.runs.triage import normalise, run_triage
from portal.runs.triage_export import CSV_COLUMNS, csv_text, rma_text
from tests.portal.helpers import add_measurement, set_result

AT = datetime(2026, 12, 1, 12, 0, 5, tzinfo=UTC)


def _inventory(run: Run, hostname: str, status: str = "pass") -> None:
    result = set_result(run, hostname, "gpu-inventory", status, finished_at=AT)
    for gpu in range(8):
        add_measurement(result, "gpu_serial", text=f"SN-{hostname}-{gpu}", gpu=gpu)
        add_measurement(result, "gpu_pci_bus_id", text=f"00000000:{gpu + 0x18:02X}:00.0", gpu=gpu)


def _ecc_fail(run: Run, hostname: str, gpu: int, count: int) -> None:
    result = set_result(
        run,
        hostname,
        "ecc-health",
        "fail",
        f"GPU {gpu}: {count} uncorrectable volatile ECC errors (max 0)",
        finished_at=AT,
    )
    add_measurement(result, "ecc_volatile_uncorrected", value=float(count), gpu=gpu, threshold="<= 0", ok=False,
                    recorded_at=AT)  # fmt: skip
    add_measurement(result, "ecc_volatile_uncorrected", value=0.0, gpu=(gpu + 1) % 8, threshold="<= 0", ok=True)


@pytest.fixture
def run(cluster, make_run) -> Run:
    """n01 and n03: uncorrectable ECC (GPU 5, GPU 2); n02 unreachable; n04 healthy."""
    cluster.nodes.filter(hostname="n01").update(serial="NODE-SN-01")
    run = make_run(cluster)
    for hostname in ("n01", "n03", "n04"):
        _inventory(run, hostname)
    _ecc_fail(run, "n01", 5, 2)
    _ecc_fail(run, "n03", 2, 7)
    set_result(run, "n04", "ecc-health", "pass")
    for item in ("gpu-inventory", "ecc-health"):
        set_result(run, "n02", item, "error", "[Errno None] Unable to connect to port 22 on 127.0.0.3")
    return run


def test_it_groups_the_same_fault_on_two_nodes_into_one_line(run):
    lines = run_triage(run_id=run.pk)
    ecc = lines[0]
    assert (ecc.status, ecc.cause, ecc.node_set, ecc.count) == ("fail", "ecc", "n[01,03]", 2)
    assert ecc.action == RMA and ecc.checks == ["ECC and Xid"]
    assert ecc.rules == ["ecc_volatile_uncorrected <= 0"]
    assert [(h, g.index, g.serial, g.bus_id) for h, g in ecc.gpus] == [
        ("n01", 5, "SN-n01-5", "00000000:1D:00.0"),
        ("n03", 2, "SN-n03-2", "00000000:1A:00.0"),
    ]
    assert [e.measured for m in ecc.members for e in m.evidence] == ["2", "7"]


def test_it_gives_an_unreachable_node_one_error_line_for_all_its_checks(run):
    lines = run_triage(run_id=run.pk)
    assert len(lines) == 2
    error = lines[1]
    assert (error.status, error.node_set, error.count) == ("error", "n02", 1)
    assert error.checks == ["GPU inventory", "ECC and Xid"]
    assert error.action == COULD_NOT_TELL and "check SSH" in error.action and "sshd" in error.action
    assert "Unable to connect to port 22" in error.reason
    assert error.gpus == []


def test_it_keeps_different_faults_apart(cluster, make_run):
    run = make_run(cluster)
    _inventory(run, "n02")
    _ecc_fail(run, "n01", 5, 2)
    result = set_result(run, "n02", "gpu-inventory", "fail", "driver 535.104.05, expected 550.54.15")
    add_measurement(result, "driver_version", text="535.104.05", threshold="== 550.54.15", ok=False)
    lines = run_triage(run_id=run.pk)
    assert [(ln.node_set, ln.cause, ln.action) for ln in lines] == [
        ("n01", "ecc", RMA),
        ("n02", "software", REINSTALL_DRIVER),
    ]
    assert "reinstall the pinned driver" in lines[1].action


def test_it_takes_the_xid_action_from_the_catalogue(cluster, make_run):
    run = make_run(cluster)
    result = set_result(run, "n04", "ecc-health", "fail", "GPU 1: Xid 64 (ECC page retirement or row remapping failed)")
    add_measurement(result, "xid", value=64.0, gpu=1, threshold="no fail/warn Xid", ok=False, labels={"kind": "xid"})
    (line,) = run_triage(run_id=run.pk)
    assert (line.cause, line.action) == ("xid", "reset the GPU; RMA candidate")


def test_it_normalises_numbers_and_the_node_name():
    assert normalise("n01: GPU 5: 2 errors on 127.0.0.3", "n01") == "<node>: GPU #: # errors on #"


def test_the_csv_has_one_row_per_line_with_the_node_set_expanded(run):
    rows = list(csv.reader(io.StringIO(csv_text(run_triage(run_id=run.pk)))))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == 3
    ecc = dict(zip(CSV_COLUMNS, rows[1], strict=True))
    assert (ecc["nodes"], ecc["node_count"], ecc["nodes_expanded"]) == ("n[01,03]", "2", "n01 n03")
    assert ecc["measured"] == "n01 GPU 5: ecc_volatile_uncorrected 2; n03 GPU 2: ecc_volatile_uncorrected 7"
    assert "n01 GPU 5 serial SN-n01-5 PCI 00000000:1D:00.0" in ecc["gpus"] and ecc["action"] == RMA
    error = dict(zip(CSV_COLUMNS, rows[2], strict=True))
    assert error["status"] == "error" and error["nodes_expanded"] == "n02"


def test_the_rma_text_names_serials_evidence_and_utc_times(run):
    text = rma_text(run_triage(run_id=run.pk))
    n01 = text.split("=" * 72)[0]
    result_id = run.results.get(node__hostname="n01", item_key="ecc-health").pk
    for expected in (
        "Node: n01",
        "Node serial: NODE-SN-01",
        "GPU 5: serial SN-n01-5, PCI bus id 00000000:1D:00.0",
        "ecc_volatile_uncorrected on GPU 5 measured 2, threshold <= 0",
        f"result /results/{result_id}/, recorded 2026-12-01T12:00:05Z",
        f"(run /runs/{run.pk}/), finished 2026-12-01T12:00:05Z",
        RMA,
    ):
        assert expected in n01, expected
    assert "Node: n02" in text and COULD_NOT_TELL in text and "Node: n04" not in text


def test_a_viewer_sees_the_triage_lines_with_links(run, client, make_user):
    client.force_login(make_user("vic", "viewer"))
    page = client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
    assert page.count('class="triage-line"') == 2
    result_id = run.results.get(node__hostname="n01", item_key="ecc-health").pk
    assert f'href="{reverse("history:node_detail", args=["c1", "n01"])}"' in page
    assert f'href="{reverse("runs:result_detail", args=[result_id])}"' in page
    assert "n[01,03]" in page and RMA in page
    # The measured value and its limit as people write them (not "2 vs <= 0").
    assert "ecc_volatile_uncorrected (GPU 5): <b>2</b>, limit ≤ 0" in page
    csv_response = client.get(reverse("runs:run_triage_csv", args=[run.pk]))
    assert csv_response.status_code == 200 and csv_response["Content-Type"] == "text/csv"
    assert "n[01,03]" in csv_response.content.decode()
    rma = client.get(reverse("runs:run_triage_rma", args=[run.pk]))
    assert rma.status_code == 200 and "Node: n01" in rma.content.decode()
    one = client.get(reverse("runs:run_triage_rma", args=[run.pk]), {"node": "n03"}).content.decode()
    assert one.startswith("Node: n03\n") and "Node: n01" not in one and "SN-n03-2" in one
    assert f'href="{reverse("runs:run_triage_rma", args=[run.pk])}?node=n03"' in page


def test_the_exports_need_a_login(run, client):
    response = client.get(reverse("runs:run_triage_csv", args=[run.pk]))
    assert response.status_code == 302 and "login" in response.url


def test_a_run_without_faults_says_so(cluster, make_run, client, make_user):
    run = make_run(cluster)
    client.force_login(make_user("vic", "viewer"))
    page = client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
    assert "Nothing to triage" in page and 'class="triage-line"' not in page


def test_a_group_result_speaks_for_the_nodes_it_names(cluster, make_run):
    run = make_run(cluster)
    attribution = {
        "n02": {"status": "error", "reason": "node power: readings at 39 of 45 time points"},
        "n03": {"status": "error", "reason": "node power: readings at 38 of 45 time points"},
        "n04": {"status": "pass", "reason": "within the circuit"},
    }
    set_result(run, "n01", "ecc-health", "error", "2 nodes short of readings", scope="group",
               node_set="n[01-04]", attribution=attribution, exit_code=0)  # fmt: skip
    (line,) = run_triage(run_id=run.pk)
    # The nodes answered (exit code 0): what to fix is in their readings, not in SSH.
    assert (line.status, line.node_set, line.count, line.action) == ("error", "n[02-03]", 2, COULD_NOT_JUDGE)
    assert [(c.check, own) for c, own in line.cited] == [("ECC and Xid", "")]  # one shared result, cited once


def test_a_group_error_naming_no_node_is_a_line_for_every_node_it_spanned(cluster, make_run):
    """Not its launcher alone: "n01 (1 node)" would point at one node for a verdict of the group."""
    run = make_run(cluster)
    set_result(run, "n01", "ecc-health", "error", "rack R01: the rack's load unknown", scope="group",
               node_set="n[01-04]", attribution={})  # fmt: skip
    (line,) = run_triage(run_id=run.pk)
    assert (line.status, line.node_set, line.count) == ("error", "n[01-04]", 4)
    assert line.action == COULD_NOT_TELL  # no exit code, output or samples: the nodes gave nothing back


@pytest.mark.parametrize(
    ("answer", "action"),
    [
        ({}, COULD_NOT_TELL),
        ({"exit_code": 127, "stderr": "nvidia-smi: command not found"}, COULD_NOT_JUDGE),
        ({"stdout": "<?xml version="}, COULD_NOT_JUDGE),  # truncated output, no exit code (timed out)
    ],
)
def test_an_error_says_ssh_only_when_the_node_gave_nothing_back(cluster, make_run, answer, action):
    run = make_run(cluster)
    set_result(run, "n01", "ecc-health", "error", "could not read the GPUs", **answer)
    (line,) = run_triage(run_id=run.pk)
    assert line.action == action
