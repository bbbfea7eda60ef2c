"""Fixtures for the security tests: the health and portal unit fixtures (a cluster `c1` with nodes
n01..n04, runs built through the services, eager Celery, the testbed's fake scontrol/kubectl)."""

from __future__ import annotations

from tests.health.conftest import controller, eager_celery, sim_paths  # noqa: F401 (fixtures)
from tests.portal.conftest import cluster, make_run, quick_plan  # noqa: F401 (fixtures)
