"""kiln_nodes add CLUSTER 'gpu[001-064]' [--address ...] | kiln_nodes import CLUSTER FILE | kiln_nodes list CLUSTER"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.inventory.models import Cluster
from portal.inventory.services import InventoryError, nodes_add, nodes_import_csv


class Command(BaseCommand):
    help = "Add, import or list a cluster's nodes."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="add nodes from a node set")
        add.add_argument("cluster")
        add.add_argument("nodeset", help="e.g. 'gpu[001-064]'")
        add.add_argument("--address", default="", help="one address, or an address set of the same length")
        add.add_argument("--rack", default="")
        add.add_argument("--expected-gpus", type=int, default=None)
        imp = sub.add_parser("import", help="import nodes from CSV (hostname,address,rack,position,...)")
        imp.add_argument("cluster")
        imp.add_argument("file")
        lst = sub.add_parser("list", help="list nodes")
        lst.add_argument("cluster")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            cluster = Cluster.objects.get(name=options["cluster"])
        except Cluster.DoesNotExist:
            raise CommandError(f"no cluster named {options['cluster']!r}") from None
        action = options["action"]
        if action == "list":
            for node in cluster.nodes.all():
                self.stdout.write(f"{node.hostname}\t{node.address}\t{node.rack}")
            return
        try:
            if action == "add":
                fields: dict[str, Any] = {}
                if options["rack"]:
                    fields["rack"] = options["rack"]
                if options["expected_gpus"] is not None:
                    fields["expected_gpus"] = options["expected_gpus"]
                report = nodes_add(
                    cluster=cluster, hostnames=options["nodeset"], addresses=options["address"], fields=fields
                )
            else:
                try:
                    text = Path(options["file"]).read_text()
                except OSError as exc:
                    raise CommandError(f"cannot read {options['file']}: {exc.strerror}") from None
                report = nodes_import_csv(cluster=cluster, text=text)
        except InventoryError as exc:
            raise CommandError(str(exc)) from None
        if report.created:
            self.stdout.write(f"added {len(report.created)}: {NodeSet.fromlist(report.created)}")
        if report.updated:
            self.stdout.write(f"updated {len(report.updated)}: {NodeSet.fromlist(report.updated)}")
