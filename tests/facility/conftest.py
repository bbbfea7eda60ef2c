"""Fixtures of the facility tests: a credential key, and a 12-node cluster with 3 racks, 6 PDUs (A and B
per rack, 3-phase, 230 V, 63 A), one UPS and one water loop (as tests/checks/soak_builder.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from portal.facility import credentials, services
from portal.facility.models import CoolingLoop, Pdu, Rack, Ups
from portal.inventory.models import Cluster, Node
from tests.portal.conftest import cluster  # noqa: F401 (fixture)

RACKS = ("r1", "r2", "r3")
HOSTS = tuple(f"gpu{i:02d}" for i in range(1, 13))
SECRET = "Pl4nted-s3cret-pw"  # the password the leak tests look for
SECRET_USER = "pdu-admin-9f3c"  # and the user name


def rack_of(host: str) -> str:
    return RACKS[(int(host[3:]) - 1) // 4]


@pytest.fixture(autouse=True)
def credential_key(settings) -> str:
    """A fresh Fernet key for each test (the data folder's key is not the tests' business)."""
    settings.KILN_CREDENTIAL_KEY = credentials.generate_key()
    return settings.KILN_CREDENTIAL_KEY


@dataclass
class Site:
    cluster: Cluster
    racks: dict[str, Rack]
    pdus: dict[str, Pdu]
    ups: Ups
    loop: CoolingLoop


def build_site(name: str = "fac") -> Site:
    owner = Cluster.objects.create(name=name, profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=owner, hostname=h, rack=rack_of(h)) for h in HOSTS)
    racks = {
        r: services.rack_save(
            rack=Rack(
                cluster=owner, name=r, power_budget_kw=40, cooling_budget_kw=40, room="hall1", row="A", position=i
            )
        )
        for i, r in enumerate(RACKS)
    }
    pdus = {}
    for r in RACKS:
        for feed in ("A", "B"):
            pdu = Pdu(
                rack=racks[r], name=f"pdu-{r}-{feed.lower()}", feed=feed, phases=3, voltage_v=230, breaker_a=[63] * 3
            )
            pdus[pdu.name] = services.pdu_save(pdu=pdu)
    ups = services.ups_save(ups=Ups(cluster=owner, name="ups1", capacity_kw=120), racks=list(racks.values()))
    loop = services.loop_save(loop=CoolingLoop(cluster=owner, name="cdu1", fluid="water"), racks=list(racks.values()))
    return Site(owner, racks, pdus, ups, loop)


@pytest.fixture
def site(db) -> Site:
    return build_site()


@pytest.fixture
def secret_site(site: Site) -> Site:
    """The site with the planted credential on a PDU and on the loop, both with endpoints."""
    change = services.CredentialChange(SECRET_USER, SECRET)
    pdu = site.pdus["pdu-r2-a"]
    pdu.endpoint_url = "https://pdu-r2-a.example.net/redfish/v1"
    services.pdu_save(pdu=pdu, credential=change)
    site.loop.endpoint_url = "https://cdu1.example.net/redfish/v1"
    services.loop_save(loop=site.loop, racks=list(site.racks.values()), credential=change)
    return site
