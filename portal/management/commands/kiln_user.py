"""kiln_user add NAME --role R [--side vendor|customer] [--email E] [--full-name N] [--organisation O]
[--password-stdin] | list | set-role NAME --role R [--side S] | set NAME [--full-name N] [--organisation O] |
disable NAME | enable NAME

Roles and sides are explained in docs/user-guide/users-and-roles.md; the writes are portal/users.py.
`kiln user token ...` is the API's kiln_token command (the `kiln` CLI forwards it there).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal import users
from portal.roles import APPROVER, ROLES


class Command(BaseCommand):
    help = (
        "Add users with a role (viewer, operator, approver; an approver also a side: vendor or customer), "
        "list them, change roles, disable or enable login. API tokens: `kiln user token NAME ...`."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="create a user (no password until one is set)")
        add.add_argument("name")
        self._role_arguments(add)
        add.add_argument("--email", default="")
        self._detail_arguments(add)
        add.add_argument("--password-stdin", action="store_true", help="read the password from the first line of stdin")
        lst = sub.add_parser(
            "list", help="every user: roles, side, active or disabled, e-mail, full name, organisation"
        )
        lst.add_argument("--json", action="store_true", help="print a JSON list")
        setrole = sub.add_parser("set-role", help="give a user exactly these roles (and side)")
        setrole.add_argument("name")
        self._role_arguments(setrole)
        details = sub.add_parser("set", help="change a user's full name and/or organisation ('' clears one)")
        details.add_argument("name")
        self._detail_arguments(details)
        for action, text in (("disable", "refuse the user's logins"), ("enable", "allow the user's logins again")):
            sub.add_parser(action, help=text).add_argument("name")

    @staticmethod
    def _role_arguments(parser: CommandParser) -> None:
        parser.add_argument(
            "--role",
            action="append",
            required=True,
            choices=ROLES,
            help="viewer reads; operator also runs checks and edits inventory; approver waives and signs "
            "(repeat for several roles)",
        )
        parser.add_argument(
            "--side",
            choices=users.SIDES,
            default=None,
            help="approvers only: the party of the handover they sign for (a certificate needs one signature of each)",
        )

    @staticmethod
    def _detail_arguments(parser: CommandParser) -> None:
        parser.add_argument(
            "--full-name",
            default=None,
            help='as certificates name the user when they sign or waive, e.g. "Vera Vendor"',
        )
        parser.add_argument(
            "--organisation",
            default=None,
            help='the company or body the user belongs to, shown beside their name, e.g. "Example GPU Systems Ltd"',
        )

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        try:
            if action == "list":
                self._list(as_json=options["json"])
            elif action == "add":
                self._add(options)
            elif action == "set-role":
                user = users.user_roles_set(username=options["name"], roles=options["role"], side=options["side"])
                self._say_roles("set", users.user_summary(user=user))
            elif action == "set":
                user = users.user_details_set(
                    username=options["name"], full_name=options["full_name"], organisation=options["organisation"]
                )
                self._say_details(users.user_summary(user=user))
            else:
                changed = users.user_active_set(username=options["name"], active=action == "enable")
                state = "enabled" if action == "enable" else "disabled"
                self.stdout.write(f"{options['name']}: {state}" + ("" if changed else " already"))
        except users.UserError as exc:
            raise CommandError(str(exc)) from None

    def _add(self, options: dict[str, Any]) -> None:
        password = None
        if options["password_stdin"]:
            password = sys.stdin.readline().rstrip("\r\n")
        user, created = users.user_add(
            username=options["name"],
            roles=options["role"],
            side=options["side"],
            email=options["email"],
            password=password,
            full_name=options["full_name"],
            organisation=options["organisation"],
        )
        summary = users.user_summary(user=user)
        if not created:
            self._say_roles("exists already, unchanged", summary)
            return
        self._say_roles("created", summary)
        if summary.full_name or summary.organisation:
            self._say_details(summary)
        if password is None:
            self.stdout.write(
                f"{summary.username} has no password yet: set one with `kiln manage changepassword {summary.username}`"
            )

    def _say_roles(self, what: str, summary: users.UserSummary) -> None:
        side = f", {summary.side} side" if summary.side else ""
        self.stdout.write(f"{summary.username}: {what} ({', '.join(summary.roles)}{side})")
        if APPROVER in summary.roles and summary.side is None:
            self.stderr.write(
                f"note: {summary.username} cannot sign certificates without a side: "
                f"`kiln user set-role {summary.username} --role approver --side vendor` (or customer)"
            )

    def _say_details(self, summary: users.UserSummary) -> None:
        self.stdout.write(
            f"{summary.username}: full name {summary.full_name or '(none)'}, "
            f"organisation {summary.organisation or '(none)'}"
        )

    def _list(self, *, as_json: bool) -> None:
        rows = users.users_list()
        if as_json:
            self.stdout.write(json.dumps([asdict(r) for r in rows]))
            return
        for r in rows:
            flags = ["active" if r.active else "disabled", *(["superuser"] if r.superuser else [])]
            roles = ",".join(r.roles) or "-"
            self.stdout.write(
                f"{r.username}\t{roles}\t{r.side or '-'}\t{' '.join(flags)}\t{r.email or '-'}"
                f"\t{r.full_name or '-'}\t{r.organisation or '-'}"
            )
