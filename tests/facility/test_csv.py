"""The facility CSV: a good file imports every type in any row order, an export imports back to the
same model, and any bad row refuses the whole file with the row and field named."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from portal.facility import csvio, selectors
from portal.facility.csvio import CsvError
from portal.facility.importing import facility_import_csv
from portal.facility.models import CoolingLoop, NodeFeed, Pdu, Rack, Ups
from portal.inventory.models import Cluster, Node
from tests.facility.conftest import SECRET, SECRET_USER

pytestmark = pytest.mark.django_db

GOOD = (
    (
        "type,name,rack,power_budget_kw,cooling_budget_kw,room,row,position,feed,phases,voltage_v,breaker_a,"
        "endpoint_url,verify_tls,capacity_kw,racks,fluid,node,pdu,phase,share\n"
    )
    + """pdu,pdu-r1-a,r1,,,,,,A,3,230,63,https://pdu-r1-a.example.net/redfish/v1,no,,,,,,,
pdu,pdu-r1-b,r1,,,,,,B,3,230,32;32;16,,,,,,,,,
rack,r1,,40,35.5,hall1,A,0,,,,,,,,,,,,,
rack,r2,,40,40,hall1,A,1,,,,,,,,,,,,,
pdu,pdu-r2-a,r2,,,,,,A,1,120,30,,,,,,,,,
ups,ups1,,,,,,,,,,,,,120,r1;r2,,,,,
loop,cdu1,,,,,,,,,,,,,,r1;r2,pg25,,,,
feed,,,,,,,,,,,,,,,,,n01,pdu-r1-a,2,0.5
feed,,,,,,,,,,,,,,,,,n01,pdu-r1-b,3,0.5
"""
)


def test_it_imports_every_type_whatever_the_row_order(cluster: Cluster) -> None:
    report = facility_import_csv(cluster=cluster, text=GOOD)
    assert report.summary() == "2 racks added, 3 PDUs added, 1 UPS added, 1 loop added, feeds of 1 node(s) replaced"
    r1 = Rack.objects.get(cluster=cluster, name="r1")
    assert (r1.cooling_budget_kw, r1.room, r1.row, r1.position) == (35.5, "hall1", "A", 0)
    a = Pdu.objects.get(name="pdu-r1-a")
    assert (a.feed, a.phases, a.breaker_a, a.verify_tls, a.endpoint_url) == (
        "A", 3, [63.0] * 3, False, "https://pdu-r1-a.example.net/redfish/v1"
    )  # fmt: skip
    assert Pdu.objects.get(name="pdu-r1-b").breaker_a == [32.0, 32.0, 16.0]
    assert Pdu.objects.get(name="pdu-r2-a").voltage_v == 120.0
    assert sorted(Ups.objects.get(name="ups1").racks.values_list("name", flat=True)) == ["r1", "r2"]
    assert CoolingLoop.objects.get(name="cdu1").fluid == "pg25"
    assert list(NodeFeed.objects.values_list("node__hostname", "pdu__name", "phase", "share")) == [
        ("n01", "pdu-r1-a", 2, 0.5), ("n01", "pdu-r1-b", 3, 0.5)
    ]  # fmt: skip


def test_a_second_import_updates_by_name_and_keeps_what_the_header_lacks(cluster: Cluster) -> None:
    facility_import_csv(cluster=cluster, text=GOOD)
    report = facility_import_csv(cluster=cluster, text="type,name,power_budget_kw,cooling_budget_kw\nrack,r1,50,50\n")
    assert report.updated == {"rack": ["r1"]}
    r1 = Rack.objects.get(cluster=cluster, name="r1")
    assert (r1.power_budget_kw, r1.room, r1.position) == (50.0, "hall1", 0)
    assert Rack.objects.filter(cluster=cluster).count() == 2  # nothing deleted


def test_an_export_imports_back_to_the_same_model(cluster: Cluster) -> None:
    facility_import_csv(cluster=cluster, text=GOOD)
    exported = csvio.export_csv(cluster=cluster)
    before = selectors.facility_snapshot(cluster=cluster)
    other = Cluster.objects.create(name="c2", transport="local")
    Node.objects.bulk_create(Node(cluster=other, hostname=n.hostname, rack=n.rack) for n in cluster.nodes.all())
    facility_import_csv(cluster=other, text=exported)
    assert selectors.facility_snapshot(cluster=other) == before
    assert csvio.export_csv(cluster=other) == exported
    assert exported.splitlines()[0] == ",".join(csvio.HEADER)


def test_the_export_never_holds_a_credential(secret_site) -> None:
    exported = csvio.export_csv(cluster=secret_site.cluster)
    assert SECRET not in exported and SECRET_USER not in exported and "gAAAA" not in exported
    assert "https://pdu-r2-a.example.net/redfish/v1" in exported  # the endpoint itself is no secret


def bad(cluster: Cluster, text: str) -> str:
    facility_import_csv(cluster=cluster, text="type,name,power_budget_kw,cooling_budget_kw\nrack,r0,10,10\n")
    before = csvio.export_csv(cluster=cluster)
    with pytest.raises(CsvError) as caught:
        facility_import_csv(cluster=cluster, text=text)
    assert csvio.export_csv(cluster=cluster) == before, "nothing of the bad file was imported"
    return str(caught.value)


H = "type,name,rack,power_budget_kw,cooling_budget_kw,phases,breaker_a,capacity_kw,racks,fluid,node,pdu,phase,share\n"
R1 = "rack,r1,,40,40,,,,,,,,,\n"


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (R1 + "rack,r2,,40,-1,,,,,,,,,\n", "row 3 (rack r2), field cooling_budget_kw: must be more than 0"),
        (R1 + "rack,r2,,40,lots,,,,,,,,,\n", "row 3 (rack r2), field cooling_budget_kw: 'lots' is not a number"),
        (R1 + "rack,r2,,nan,40,,,,,,,,,\n", "row 3 (rack r2), field power_budget_kw: must be a finite number"),
        (R1 + "pdu,p1,r1,,,3,32;32,,,,,,,\n", "row 3 (pdu p1), field breaker_a: 2 ratings for 3 phase(s)"),
        (R1 + "pdu,p1,r9,,,3,32,,,,,,,\n", "row 3 (pdu p1), field rack: no rack 'r9'"),
        (R1 + "pdu,p1,r1,,,2,32,,,,,,,\n", "row 3 (pdu p1), field phases"),
        (R1 + "pdu,p1,r1,,,3,,,,,,,,\n", "row 3 (pdu p1), field breaker_a: required"),
        (R1 + "ups,u1,,,,,,120,r1;r7,,,,,\n", "row 3 (ups u1), field racks: no rack r7"),
        (R1 + "ups,u1,,,,,,0,r1,,,,,\n", "row 3 (ups u1), field capacity_kw: must be more than 0"),
        (R1 + "loop,l1,,,,,,,r1,glycol,,,,\n", "row 3 (loop l1), field fluid"),
        (R1 + "rack,r2,,40,40,,,,,,,,,\nrack,r2,,40,40,,,,,,,,,\n", "row 4 (rack r2): the same rack as row 3"),
        (R1 + "tank,t1,,,,,,,,,,,,\n", "row 3, field type: 'tank' is not one of rack, pdu, feed, ups, loop"),
        (R1 + "rack,r2,r1,40,40,,,,,,,,,\n", "row 3 (rack r2), field rack: not a column of a rack row"),
        (R1 + "rack,r2,,40,,,,,,,,,,\n", "row 3 (rack r2), field cooling_budget_kw: required"),
        (R1 + "feed,,,,,,,,,,n01,pdu-x,1,1\n", "row(s) 3 (feeds of node n01): node n01, field pdu: no PDU 'pdu-x'"),
        (R1 + "feed,,,,,,,,,,n99,pdu-x,1,1\n", "row 3 (feed n99), field node: no node 'n99'"),
        (R1 + "feed,,,,,,,,,,n01,pdu-x,one,1\n", "row 3 (feed n01), field phase: 'one' is not a whole number"),
        (R1 + "rack,r2,,40,40,,,,,,,,,,extra\n", "row 3: 15 cells for 14 columns"),
        ("", "row 1: the header needs a 'type' column"),
        (H, "the CSV has a header but no rows"),
    ],
)
def test_a_bad_row_refuses_the_whole_file_naming_row_and_field(cluster: Cluster, rows: str, message: str) -> None:
    text = rows if rows.startswith("type") or not rows else H + rows
    assert message in bad(cluster, text)


def test_feed_shares_that_do_not_add_up_name_the_nodes_rows(cluster: Cluster) -> None:
    rows = H + R1 + "pdu,pa,r1,,,3,32,,,,,,,\nfeed,,,,,,,,,,n01,pa,1,0.5\nfeed,,,,,,,,,,n01,pa,2,0.25\n"
    assert "row(s) 4, 5 (feeds of node n01): node n01, field share: feed shares add up to 0.75, not 1" in bad(
        cluster, rows
    )


def test_credential_and_unknown_columns_are_refused(cluster: Cluster) -> None:
    message = bad(cluster, "type,name,rack,breaker_a,password\npdu,p1,r0,32,hunter2\n")
    assert "row 1: column(s) password: credentials are not imported from CSV" in message and "hunter2" not in message
    assert "row 1: unknown column(s) colour" in bad(cluster, "type,name,colour\nrack,r1,red\n")


def test_a_file_over_the_limit_or_not_utf8_is_refused() -> None:
    with pytest.raises(CsvError, match="not UTF-8"):
        csvio.decode(b"type,name\nrack,\xff\n")
    with pytest.raises(CsvError, match="at most"):
        csvio.decode(b"x" * (csvio.MAX_CSV_BYTES + 1))
    assert csvio.decode("\ufefftype\n".encode()) == "type\n"


def test_the_import_command_imports_or_refuses_with_the_row(cluster: Cluster, tmp_path: Path, capsys) -> None:
    good = tmp_path / "good.csv"
    good.write_text(GOOD)
    call_command("kiln_facility_import", "c1", str(good))
    assert "c1: 2 racks added, 3 PDUs added" in capsys.readouterr().out
    bad_file = tmp_path / "bad.csv"
    bad_file.write_text(H + "rack,r5,,40,0,,,,,,,,,\n")
    with pytest.raises(CommandError, match="row 2 \\(rack r5\\), field cooling_budget_kw.*nothing was imported"):
        call_command("kiln_facility_import", "c1", str(bad_file))
    assert not Rack.objects.filter(name="r5").exists()
    with pytest.raises(CommandError, match="no cluster named 'nope'"):
        call_command("kiln_facility_import", "nope", str(good))


def test_the_export_command_prints_the_csv(cluster: Cluster, capsys) -> None:
    facility_import_csv(cluster=cluster, text=GOOD)
    call_command("kiln_facility_export", "c1")
    assert capsys.readouterr().out == csvio.export_csv(cluster=cluster)
