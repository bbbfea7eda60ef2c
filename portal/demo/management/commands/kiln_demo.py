"""kiln_demo: seed the `demo` cluster (portal/demo/cluster.py): 8 simulated nodes on the local
transport, two of them faulty. Running it twice is harmless: it converges to the same cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from portal.demo.cluster import DEMO_FAULTS, DEMO_NODES, DEMO_RACKS, demo_cluster_ensure
from portal.inventory.models import Cluster


class Command(BaseCommand):
    help = "Seed the demo cluster (8 simulated nodes, 2 faulty) on the local transport."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--healthy", action="store_true", help="clear the demo faults")
        parser.add_argument(
            "--certificate",
            metavar="OUT.pdf",
            type=Path,
            help="also run the demo acceptance (and print its triage), waive demo03, leave demo06 out of scope, "
            "have two demo approvers sign, and write the issued certificate to OUT.pdf (creates demo site keys if "
            "there are none)",
        )
        parser.add_argument(
            "--soak",
            action="store_true",
            help="only queue a demo heat soak (plan demo-power-cooling) when the demo has none yet; needs a "
            "worker and the demo facility service (`make up` starts both)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["soak"]:
            self._soak_once()
            return
        seeded = demo_cluster_ensure(healthy=options["healthy"])
        created, outside = seeded.created, seeded.outside
        what = "created" if created else "refreshed"
        fault_text = (
            "no faults"
            if options["healthy"]
            else ", ".join(f"{h}: {', '.join(f'{k}={v}' for k, v in f.items())}" for h, f in DEMO_FAULTS.items())
        )
        self.stdout.write(f"{what} cluster demo with {len(DEMO_NODES)} simulated nodes ({fault_text})")
        if outside:
            racks = ", ".join(DEMO_RACKS)
            self.stdout.write(f"{', '.join(outside)}: not in a demo rack ({racks}), their PDU feeds left as they are")
        self.stdout.write(
            "plans: quick, demo-acceptance (the acceptance plan at simulator speed), demo-power-cooling (heat soak)"
        )
        if options["certificate"]:
            self._certificate(options["certificate"], healthy=options["healthy"])
        elif not settings.KILN_ALLOW_LOCAL_TRANSPORT:
            self.stderr.write(
                "note: the demo's nodes run on the local transport (on the worker host itself), which this "
                "server refuses until KILN_ALLOW_LOCAL_TRANSPORT=1 (`make up` sets it)"
            )

    def _soak_once(self) -> None:
        from portal.runs.models import CheckResult
        from portal.runs.services import RunStartError, nodes_select, run_start

        cluster = Cluster.objects.filter(name="demo").first()
        if cluster is None:
            raise CommandError("no demo cluster: run kiln_demo first")
        if CheckResult.objects.filter(run__cluster=cluster, kind="power_soak").exists():
            self.stdout.write("the demo already has a heat soak: nothing queued")
            return
        from portal.catalog.models import TestPlan

        plan = TestPlan.objects.get(slug="demo-power-cooling")
        try:
            with transaction.atomic():
                run = run_start(cluster=cluster, plan=plan, nodes=nodes_select(cluster=cluster, node_set=""))
        except RunStartError as exc:
            raise CommandError(f"demo heat soak: {exc}") from None
        self.stdout.write(f"queued the demo heat soak: run {run.pk} (about two minutes)")

    def _certificate(self, out: Path, *, healthy: bool) -> None:
        from portal.certificates.services import CampaignError
        from portal.demo.certificate import demo_certificate_write

        if healthy:
            raise CommandError("--certificate shows a waiver and an exclusion: run it without --healthy")
        try:
            certificate = demo_certificate_write(out=out, say=self.stdout.write)
        except (CampaignError, OSError) as exc:
            raise CommandError(f"demo certificate: {exc}") from None
        self.stdout.write(f"certificate {certificate.number} ({certificate.verdict}) written to {out}")
        self.stdout.write(f"verify it: manage.py kiln_verify {out}   (or pdfsig {out})")
