"""kiln_cluster create NAME --ssh-user U --ssh-key PATH [--known-hosts PATH] [--jump HOST] [--profile P] [--queue Q]
kiln_cluster update NAME [--queue Q] [--site S] [--customer C] [--acceptance-plan PLAN] [--check-overhead S]
kiln_cluster list"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from checks.core.profiles import PROFILES
from portal.catalog.models import TestPlan
from portal.inventory.models import DEFAULT_QUEUE, Cluster, Transport
from portal.inventory.services import InventoryError, cluster_create, cluster_update

QUEUE_HELP = (
    "Celery queue of the workers that reach its nodes (a worker at its site: celery -A worker worker -Q NAME); "
    f"'{DEFAULT_QUEUE}' is served by a worker started without -Q"
)


class Command(BaseCommand):
    help = "Create, update or list clusters."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="register a cluster")
        create.add_argument("name")
        create.add_argument("--ssh-user", default="root")
        create.add_argument("--ssh-key", default="", help="private key path on the worker hosts")
        create.add_argument("--ssh-port", type=int, default=22)
        create.add_argument("--known-hosts", default="", help="known_hosts file with every node's host key")
        create.add_argument("--jump", default="", help="jump host, [user@]host[:port]")
        create.add_argument("--profile", default="H100-SXM-8", choices=sorted(PROFILES))
        create.add_argument(
            "--transport",
            default="ssh",
            choices=["ssh", "local"],
            help="local runs the checks on the worker host itself: only where KILN_ALLOW_LOCAL_TRANSPORT=1",
        )
        create.add_argument("--customer", default="")
        create.add_argument("--site", default="")
        create.add_argument("--queue", default=DEFAULT_QUEUE, help=QUEUE_HELP)
        update = sub.add_parser(
            "update", help="change a cluster's queue, site, customer, acceptance plan or check overhead"
        )
        update.add_argument("name")
        update.add_argument("--queue", help=QUEUE_HELP + "; runs already started keep theirs")
        update.add_argument("--site")
        update.add_argument("--customer")
        update.add_argument(
            "--acceptance-plan",
            metavar="PLAN",
            help="slug of the plan the cluster is accepted with (listed first and preselected in the plan pickers, "
            "a new campaign's default); '' for none",
        )
        update.add_argument(
            "--check-overhead",
            metavar="SECONDS",
            help="seconds a check takes on its nodes besides its declared duration, for the plan estimates until "
            "the cluster has run history; '' for each check's own figure",
        )
        sub.add_parser("list", help="list clusters")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "list":
            for cluster in Cluster.objects.all():
                self.stdout.write(
                    f"{cluster.name}\t{cluster.profile}\t{cluster.transport}\t{cluster.nodes.count()} nodes"
                    f"\tqueue {cluster.queue}"
                )
            return
        if options["action"] == "update":
            self._update(options)
            return
        try:
            cluster = cluster_create(
                name=options["name"],
                ssh_user=options["ssh_user"],
                # Workers read the key at this path: stored absolute (relative to where this runs).
                ssh_key_path=str(Path(options["ssh_key"]).resolve()) if options["ssh_key"] else "",
                ssh_port=options["ssh_port"],
                known_hosts_path=options["known_hosts"],
                jump_host=options["jump"],
                profile=options["profile"],
                transport=options["transport"],
                customer=options["customer"],
                site=options["site"],
                queue=options["queue"],
            )
        except InventoryError as exc:
            raise CommandError(str(exc)) from None
        if cluster.transport == Transport.SSH and not cluster.known_hosts:
            self.stderr.write(
                "warning: no known_hosts given: every connection will be refused until host keys are added "
                "(--known-hosts, the admin, or pinned fingerprints)"
            )
        self.stdout.write(f"created cluster {cluster.name} (profile {cluster.profile}) on queue {cluster.queue}")

    def _update(self, options: dict[str, Any]) -> None:
        cluster = Cluster.objects.filter(name=options["name"]).first()
        if cluster is None:
            raise CommandError(f"no cluster {options['name']!r}")
        changes: dict[str, Any] = {
            field: options[field] for field in ("queue", "site", "customer") if options[field] is not None
        }
        if options["acceptance_plan"] is not None:
            slug = options["acceptance_plan"]
            plan = TestPlan.objects.filter(slug=slug).first() if slug else None
            if slug and plan is None:
                raise CommandError(
                    f"no plan {slug!r} (plans: {', '.join(TestPlan.objects.values_list('slug', flat=True))})"
                )
            changes["acceptance_plan"] = plan
        if options["check_overhead"] is not None:
            try:
                changes["check_overhead_s"] = float(options["check_overhead"]) if options["check_overhead"] else None
            except ValueError:
                raise CommandError(
                    f"--check-overhead: a number of seconds, not {options['check_overhead']!r}"
                ) from None
        if not changes:
            raise CommandError(
                "nothing to change: give --queue, --site, --customer, --acceptance-plan or --check-overhead"
            )
        try:
            changed = cluster_update(cluster=cluster, changes=changes)
        except InventoryError as exc:
            raise CommandError(str(exc)) from None
        shown = {"acceptance_plan": cluster.acceptance_plan.slug if cluster.acceptance_plan else None}
        what = (
            ", ".join(f"{field} {shown.get(field, getattr(cluster, field))!r}" for field in changed)
            or "nothing changed"
        )
        self.stdout.write(f"updated cluster {cluster.name}: {what}")
