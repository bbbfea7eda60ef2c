"""Management commands: kiln_cluster, kiln_nodes, kiln_demo, kiln_run."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import connection

from portal.catalog.models import TestPlan
from portal.facility.models import NodeFeed
from portal.inventory.models import Cluster, Node
from portal.runs.models import Run

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "id_ed25519"
    path.write_text("not really a key; only its existence is checked\n")
    return path


@pytest.fixture
def c1(db) -> Cluster:
    return Cluster.objects.create(name="c1")


# --- kiln_cluster -------------------------------------------------------------------------------


def test_it_creates_a_cluster(key_file: Path, tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("gpu001 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample\n")

    output = run(
        "kiln_cluster", "create", "prod", "--ssh-user", "kiln", "--ssh-key", str(key_file),
        "--known-hosts", str(known_hosts), "--jump", "ops@bastion:2222", "--profile", "H200-SXM-8",
    )  # fmt: skip

    assert "created cluster prod (profile H200-SXM-8)" in output
    cluster = Cluster.objects.get(name="prod")
    assert (cluster.ssh_user, cluster.ssh_key_path, cluster.jump_host, cluster.profile) == (
        "kiln",
        str(key_file),
        "ops@bastion:2222",
        "H200-SXM-8",
    )
    assert cluster.known_hosts == known_hosts.read_text()
    assert "prod\tH200-SXM-8\tssh\t0 nodes" in run("kiln_cluster", "list")


def test_it_puts_a_cluster_on_a_queue_and_moves_it(key_file: Path) -> None:
    assert "on queue site-a" in run("kiln_cluster", "create", "prod", "--ssh-key", str(key_file), "--queue", "site-a")
    assert "prod\tH100-SXM-8\tssh\t0 nodes\tqueue site-a" in run("kiln_cluster", "list")

    assert run("kiln_cluster", "update", "prod", "--queue", "site-b", "--site", "DC2") == (
        "updated cluster prod: queue 'site-b', site 'DC2'\n"
    )
    assert (Cluster.objects.get(name="prod").queue, Cluster.objects.get(name="prod").site) == ("site-b", "DC2")
    with pytest.raises(CommandError, match="queue: a queue name"):
        run("kiln_cluster", "update", "prod", "--queue", "site b")
    with pytest.raises(CommandError, match="queue: a queue name"):
        run("kiln_cluster", "create", "other", "--queue", "a,b")
    with pytest.raises(CommandError, match="no cluster 'absent'"):
        run("kiln_cluster", "update", "absent", "--queue", "x")
    with pytest.raises(CommandError, match="nothing to change"):
        run("kiln_cluster", "update", "prod")
    assert Cluster.objects.get(name="prod").queue == "site-b" and Cluster.objects.count() == 1


def test_it_refuses_a_duplicate_cluster_name(key_file: Path) -> None:
    run("kiln_cluster", "create", "prod", "--ssh-key", str(key_file))
    with pytest.raises(CommandError, match="cluster 'prod' already exists"):
        run("kiln_cluster", "create", "prod", "--ssh-key", str(key_file))
    assert Cluster.objects.count() == 1


def test_it_refuses_a_missing_key_file(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"SSH key .*/absent does not exist"):
        run("kiln_cluster", "create", "prod", "--ssh-key", str(tmp_path / "absent"))
    assert not Cluster.objects.exists()


def test_it_refuses_an_unreadable_known_hosts_file(key_file: Path, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="cannot read known_hosts"):
        run("kiln_cluster", "create", "prod", "--ssh-key", str(key_file), "--known-hosts", str(tmp_path / "nope"))
    assert not Cluster.objects.exists()


@pytest.mark.parametrize(("jump", "message"), [("bastion:ssh", "is not a number"), ("ops@", "expected")])
def test_it_refuses_a_bad_jump_host(key_file: Path, jump: str, message: str) -> None:
    with pytest.raises(CommandError, match=f"jump_host: .*{message}"):
        run("kiln_cluster", "create", "prod", "--ssh-key", str(key_file), "--jump", jump)
    assert not Cluster.objects.exists()


@pytest.mark.parametrize("name", ["bad name!", "c1\n", "c1\n\n"])
def test_it_refuses_a_bad_cluster_name(key_file: Path, name: str) -> None:
    with pytest.raises(CommandError, match="name: "):
        run("kiln_cluster", "create", name, "--ssh-key", str(key_file))
    assert not Cluster.objects.exists()


def test_it_refuses_a_user_or_hostname_ending_in_a_newline(key_file: Path, c1: Cluster) -> None:
    with pytest.raises(CommandError, match="ssh_user: "):
        run("kiln_cluster", "create", "prod", "--ssh-key", str(key_file), "--ssh-user", "kiln\n")
    node = Node(cluster=c1, hostname="gpu001\n", address="10.0.0.1")
    with pytest.raises(ValidationError, match="hostname"):
        node.full_clean()


# --- kiln_nodes ---------------------------------------------------------------------------------


def test_it_adds_nodes_with_matching_addresses(c1: Cluster) -> None:
    output = run("kiln_nodes", "add", "c1", "gpu[001-004]", "--address", "10.0.0.[1-4]", "--rack", "R7")

    assert "added 4: gpu[001-004]" in output
    nodes = list(Node.objects.filter(cluster=c1).order_by("hostname").values_list("hostname", "address", "rack"))
    assert nodes == [(f"gpu00{i}", f"10.0.0.{i}", "R7") for i in range(1, 5)]


def test_it_refuses_a_count_mismatch_between_names_and_addresses(c1: Cluster) -> None:
    with pytest.raises(CommandError, match="4 hostnames but 3 addresses"):
        run("kiln_nodes", "add", "c1", "gpu[001-004]", "--address", "10.0.0.[1-3]")
    assert not Node.objects.exists()


def test_it_updates_nodes_added_again_without_duplicates(c1: Cluster) -> None:
    run("kiln_nodes", "add", "c1", "gpu[001-004]", "--address", "10.0.0.[1-4]")

    output = run("kiln_nodes", "add", "c1", "gpu[003-006]", "--address", "10.0.1.[3-6]", "--expected-gpus", "4")

    assert "added 2: gpu[005-006]" in output and "updated 2: gpu[003-004]" in output
    assert Node.objects.filter(cluster=c1).count() == 6
    rows = dict(Node.objects.values_list("hostname", "address"))
    assert rows["gpu001"] == "10.0.0.1" and rows["gpu003"] == "10.0.1.3" and rows["gpu006"] == "10.0.1.6"
    assert Node.objects.get(hostname="gpu004").expected_gpus == 4


def test_it_refuses_a_bad_node_set(c1: Cluster) -> None:
    with pytest.raises(CommandError, match="node set 'gpu\\[001-'"):
        run("kiln_nodes", "add", "c1", "gpu[001-")


def test_it_refuses_an_unknown_cluster() -> None:
    with pytest.raises(CommandError, match="no cluster named 'nope'"):
        run("kiln_nodes", "add", "nope", "gpu1")


def test_it_imports_nodes_from_csv(c1: Cluster, tmp_path: Path) -> None:
    Node.objects.create(cluster=c1, hostname="gpu002", address="old", rack="R0")
    csv_file = tmp_path / "nodes.csv"
    csv_file.write_text(
        "hostname,address,rack,position,ssh_port,expected_gpus\ngpu001,10.0.0.1,R1,U1,2222,8\ngpu002,10.0.0.2,R1,U2,,\n"
    )

    output = run("kiln_nodes", "import", "c1", str(csv_file))

    assert "added 1: gpu001" in output and "updated 1: gpu002" in output
    gpu001 = Node.objects.get(hostname="gpu001")
    assert (gpu001.address, gpu001.rack, gpu001.position, gpu001.ssh_port, gpu001.expected_gpus) == (
        "10.0.0.1",
        "R1",
        "U1",
        2222,
        8,
    )
    gpu002 = Node.objects.get(hostname="gpu002")
    assert (gpu002.address, gpu002.rack, gpu002.ssh_port) == ("10.0.0.2", "R1", None)
    assert Node.objects.count() == 2


@pytest.mark.parametrize(
    ("bad_row", "message"),
    [
        ("gpu003,10.0.0.3,eight", "line 3: expected_gpus 'eight' is not a whole number"),
        ("bad host!,10.0.0.3,8", r"line 3 \(bad host!\): hostname"),
        (",10.0.0.3,8", "line 3: empty hostname"),
        ("gpu001,10.0.0.3,8", "line 3: gpu001 appears twice"),
    ],
)
def test_it_imports_all_csv_rows_or_none(c1: Cluster, tmp_path: Path, bad_row: str, message: str) -> None:
    csv_file = tmp_path / "nodes.csv"
    csv_file.write_text(f"hostname,address,expected_gpus\ngpu001,10.0.0.1,8\n{bad_row}\ngpu004,10.0.0.4,8\n")

    with pytest.raises(CommandError, match=message):
        run("kiln_nodes", "import", "c1", str(csv_file))

    assert not Node.objects.exists()


def test_it_refuses_a_csv_with_unknown_columns(c1: Cluster, tmp_path: Path) -> None:
    csv_file = tmp_path / "nodes.csv"
    csv_file.write_text("hostname,colour\ngpu001,red\n")
    with pytest.raises(CommandError, match="unknown CSV column"):
        run("kiln_nodes", "import", "c1", str(csv_file))
    with pytest.raises(CommandError, match="cannot read"):
        run("kiln_nodes", "import", "c1", str(tmp_path / "absent.csv"))


# --- kiln_demo and kiln_run ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def demo_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data directory for every demo test: the simulator is compiled once."""
    return tmp_path_factory.mktemp("kiln-data")


@pytest.fixture
def demo_settings(settings, demo_data_dir: Path):
    settings.DATA_DIR = demo_data_dir
    return settings


def test_it_seeds_the_demo_cluster_once(demo_settings) -> None:
    first = run("kiln_demo")
    second = run("kiln_demo")

    assert "created cluster demo with 8 simulated nodes" in first
    assert "refreshed cluster demo" in second
    cluster = Cluster.objects.get()
    assert cluster.name == "demo" and cluster.transport == "local"
    assert list(cluster.nodes.values_list("hostname", flat=True)) == [f"demo{i:02d}" for i in range(1, 9)]
    assert all(node.local_env for node in cluster.nodes.all())


def test_the_demo_refreshes_around_nodes_outside_its_racks(demo_settings) -> None:
    """A node an operator added to the demo cluster, with no rack or a rack the demo does not
    power, keeps its feeds as they are (none here), and the refresh says so instead of ending in a traceback."""
    run("kiln_demo")
    cluster = Cluster.objects.get(name="demo")
    Node.objects.create(cluster=cluster, hostname="extra1")
    Node.objects.create(cluster=cluster, hostname="extra2", rack="R09")

    out = run("kiln_demo")

    assert "refreshed cluster demo" in out
    assert "extra1, extra2: not in a demo rack (R01, R02), their PDU feeds left as they are" in out
    assert not NodeFeed.objects.filter(node__hostname__startswith="extra").exists()
    assert NodeFeed.objects.filter(node__hostname="demo01").count() == 6


@pytest.mark.django_db(transaction=True)
def test_it_runs_the_demo_inline_and_prints_json(demo_settings, monkeypatch) -> None:
    if connection.vendor == "sqlite":
        # The SQLite *test* database is in memory with a shared cache, where a table lock between
        # threads fails at once (SQLITE_LOCKED) instead of waiting out the busy timeout as the real
        # file database does. One node thread at a time there; PostgreSQL runs them in parallel.
        import concurrent.futures

        class OneThread(concurrent.futures.ThreadPoolExecutor):
            def __init__(self, max_workers: int | None = None, **kwargs: object) -> None:
                super().__init__(max_workers=1, **kwargs)

        monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", OneThread)
    run("kiln_demo")
    out = StringIO()

    with pytest.raises(SystemExit) as exited:
        call_command("kiln_run", "demo", "quick", "--inline", "--json", stdout=out, stderr=StringIO())

    assert exited.value.code == 1
    data = json.loads(out.getvalue())
    assert set(data) == {"run", "status", "results"}
    assert data["run"] == Run.objects.get().pk and data["status"] == "fail"
    assert len(data["results"]) == 8 * TestPlan.objects.get(slug="quick").items.count()
    for row in data["results"]:
        assert set(row) == {"node", "check", "status", "reason", "measurements"}
        assert row["measurements"], row
        for m in row["measurements"]:
            assert set(m) - {"labels"} == {"name", "value", "unit", "gpu"}
    verdicts = {(r["node"], r["check"]): r for r in data["results"]}
    ecc = verdicts[("demo03", "ecc-health")]
    assert ecc["status"] == "fail" and "GPU 5" in ecc["reason"], ecc
    inventory = verdicts[("demo06", "gpu-inventory")]
    assert inventory["status"] == "fail" and "driver 535.104.05" in inventory["reason"], inventory
    software = verdicts[("demo06", "sw-consistency")]
    assert software["status"] == "fail" and "535.104.05" in software["reason"], software
    rest = {
        key: r["status"]
        for key, r in verdicts.items()
        if key not in {("demo03", "ecc-health"), ("demo06", "gpu-inventory"), ("demo06", "sw-consistency")}
    }
    assert set(rest.values()) == {"pass"}, rest
    count = next(m for m in verdicts[("demo01", "gpu-inventory")]["measurements"] if m["name"] == "gpu_count")
    assert count["value"] == 8


def test_it_lists_the_known_plans_for_an_unknown_plan(demo_settings) -> None:
    Cluster.objects.create(name="demo", transport="local")
    with pytest.raises(CommandError, match="no plan 'nope'; known plans: acceptance, power-cooling, quick"):
        run("kiln_run", "demo", "nope")
    with pytest.raises(CommandError, match="no cluster named 'ghost'"):
        run("kiln_run", "ghost", "quick")
    assert not Run.objects.exists()
