"""Command line for the testbed: ``python -m testbed up|down|status|fault|clear|stop-sshd|start-sshd|
freeze-sshd|thaw-sshd|rotate-key``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from testbed.cluster import Testbed, TestbedError

DEFAULT_DIR = Path("/tmp/kiln-testbed")


def _parse_fault(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not key.replace("_", "").isalnum():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. ecc_uncorrectable_gpu=3), got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m testbed",
        description="Simulated GPU cluster: network-namespace hosts, each with its own sshd (needs root).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str, *, host: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"testbed work folder (default {DEFAULT_DIR})")
        if host:
            p.add_argument("host", help="node hostname, e.g. gpu03")
        return p

    up = add("up", "bring a testbed up, print its JSON description and leave it running")
    up.add_argument("--nodes", type=int, required=True, help="number of hosts (gpu01..)")
    up.add_argument("--name", default="kb", help="short name prefixing netns/interfaces (default kb)")
    up.add_argument("--octet", type=int, default=None, help="subnet 10.OCTET.0.0/16 (default: 213 or a free one)")
    add("down", "stop every sshd of the testbed and delete its namespaces and bridge")
    add("status", "show which nodes' sshd are running (JSON)")
    add("describe", "print the testbed's JSON description")
    fault = add("fault", "set faults on one node (replaces earlier faults)", host=True)
    fault.add_argument("faults", nargs="+", type=_parse_fault, metavar="KEY=VALUE", help="e.g. ecc_uncorrectable_gpu=3")
    add("clear", "clear one node's faults", host=True)
    add("stop-sshd", "stop one node's sshd (node becomes unreachable)", host=True)
    add("start-sshd", "start one node's sshd again", host=True)
    add("freeze-sshd", "SIGSTOP every sshd process of one node (connections stay up, nothing answers)", host=True)
    add("thaw-sshd", "SIGCONT every sshd process of one node", host=True)
    add("rotate-key", "give one node a new host key, NOT updating known_hosts", host=True)
    add("restore-key", "put one node's original host key back", host=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            started = time.monotonic()
            tb = Testbed(args.nodes, args.dir, name=args.name, subnet_octet=args.octet).up()
            desc = tb.as_dict()
            desc["up_seconds"] = round(time.monotonic() - started, 3)
            print(json.dumps(desc, indent=2))
            return 0
        if args.command == "down" and not (args.dir / "testbed.json").exists():
            print(f"no testbed in {args.dir}: nothing to do")
            return 0
        tb = Testbed.load(args.dir)
        if args.command == "down":
            tb.down()
            print(f"testbed {tb.name!r} in {args.dir} is down")
        elif args.command == "status":
            status = tb.status()
            print(json.dumps({"name": tb.name, "up": sum(status.values()), "size": tb.size, "sshd": status}, indent=2))
            return 0 if all(status.values()) else 3
        elif args.command == "describe":
            print(json.dumps(tb.as_dict(), indent=2))
        elif args.command == "fault":
            tb.set_faults(args.host, **dict(args.faults))
        elif args.command == "clear":
            tb.clear_faults(args.host)
        elif args.command == "stop-sshd":
            tb.stop_sshd(args.host)
        elif args.command == "start-sshd":
            tb.start_sshd(args.host)
        elif args.command == "freeze-sshd":
            print(" ".join(str(pid) for pid in tb.freeze_sshd(args.host)))
        elif args.command == "thaw-sshd":
            tb.thaw_sshd(args.host)
        elif args.command == "rotate-key":
            tb.rotate_host_key(args.host)
        elif args.command == "restore-key":
            tb.restore_host_key(args.host)
    except TestbedError as exc:
        print(f"testbed: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
