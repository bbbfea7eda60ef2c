"""kiln_nodes add CLUSTER 'gpu[001-064]' [--address ...] | kiln_nodes list CLUSTER |
kiln_nodes import CLUSTER FILE [--format csv|slurm|slurm-json|k8s|netbox] [--dry-run]"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.inventory import importers
from portal.inventory.importers.plan import Action
from portal.inventory.models import Cluster
from portal.inventory.services import InventoryError, nodes_add, nodes_import_file


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
        formats = "; ".join(f"{key}: {label}" for key, (label, _) in importers.FORMATS.items())
        imp = sub.add_parser("import", help="import nodes from a file: Kiln CSV, Slurm, Kubernetes or NetBox")
        imp.add_argument("cluster")
        imp.add_argument("file", help="the file, or - for standard input")
        imp.add_argument("--format", choices=list(importers.FORMATS), default="csv", help=f"{formats} (default: csv)")
        imp.add_argument("--dry-run", action="store_true", help="print the changes and write nothing")
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
        if action == "import":
            self._import(cluster, options)
            return
        fields: dict[str, Any] = {}
        if options["rack"]:
            fields["rack"] = options["rack"]
        if options["expected_gpus"] is not None:
            fields["expected_gpus"] = options["expected_gpus"]
        try:
            report = nodes_add(
                cluster=cluster, hostnames=options["nodeset"], addresses=options["address"], fields=fields
            )
        except InventoryError as exc:
            raise CommandError(str(exc)) from None
        if report.created:
            self.stdout.write(f"added {len(report.created)}: {NodeSet.fromlist(report.created)}")
        if report.updated:
            self.stdout.write(f"updated {len(report.updated)}: {NodeSet.fromlist(report.updated)}")

    def _import(self, cluster: Cluster, options: dict[str, Any]) -> None:
        path = options["file"]
        try:
            if path == "-":
                data = sys.stdin.buffer.read(importers.MAX_IMPORT_BYTES + 1)
            else:
                with Path(path).open("rb") as file:
                    data = file.read(importers.MAX_IMPORT_BYTES + 1)
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        dry_run = options["dry_run"]
        try:
            plan = nodes_import_file(cluster=cluster, fmt=options["format"], data=data, dry_run=dry_run)
        except InventoryError as exc:
            raise CommandError(f"{path}: {exc}; nothing was imported") from None
        for line in plan.lines():
            self.stdout.write(line)
        created, updated = plan.of(Action.CREATE), plan.of(Action.UPDATE)
        if not dry_run:
            # The summary lines of the CSV import before formats existed (scripts read them).
            if created:
                self.stdout.write(f"added {len(created)}: {NodeSet.fromlist([c.hostname for c in created])}")
            if updated:
                self.stdout.write(f"updated {len(updated)}: {NodeSet.fromlist([c.hostname for c in updated])}")
        prefix = "dry run, nothing written: " if dry_run else f"{cluster.name}: "
        self.stdout.write(prefix + plan.summary())
