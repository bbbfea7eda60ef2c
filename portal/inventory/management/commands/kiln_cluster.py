"""kiln_cluster create NAME --ssh-user U --ssh-key PATH [--known-hosts PATH] [--jump HOST] [--profile P]"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from checks.profiles import PROFILES
from portal.inventory.models import Cluster, Transport
from portal.inventory.services import InventoryError, cluster_create


class Command(BaseCommand):
    help = "Create or list clusters."

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
        sub.add_parser("list", help="list clusters")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "list":
            for cluster in Cluster.objects.all():
                self.stdout.write(
                    f"{cluster.name}\t{cluster.profile}\t{cluster.transport}\t{cluster.nodes.count()} nodes"
                )
            return
        if Cluster.objects.filter(name=options["name"]).exists():
            raise CommandError(f"cluster {options['name']!r} already exists")
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
            )
        except InventoryError as exc:
            raise CommandError(str(exc)) from None
        if cluster.transport == Transport.SSH and not cluster.known_hosts:
            self.stderr.write(
                "warning: no known_hosts given: every connection will be refused until host keys are added "
                "(--known-hosts, the admin, or pinned fingerprints)"
            )
        self.stdout.write(f"created cluster {cluster.name} (profile {cluster.profile})")
