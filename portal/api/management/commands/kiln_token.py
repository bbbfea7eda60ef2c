"""`manage.py kiln_token USERNAME [--name N] [--revoke PREFIX] [--list]`: API tokens from the shell.

Creating prints the secret once, on its own line (Kiln keeps only its hash)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.api import selectors, services


class Command(BaseCommand):
    help = "Create (default), list or revoke a user's REST API tokens. A new token's secret is printed once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="command line", help="What the token is for.")
        action = parser.add_mutually_exclusive_group()
        action.add_argument("--revoke", metavar="PREFIX", help="Revoke the user's token with this prefix.")
        action.add_argument("--list", action="store_true", help="List the user's tokens (never their secrets).")

    def handle(self, *args: Any, **options: Any) -> None:
        user = User.objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user {options['username']!r}")
        try:
            if options["list"]:
                self._list(user)
            elif options["revoke"]:
                token = services.token_revoke(user=user, prefix=options["revoke"])
                self.stdout.write(f"revoked {token.prefix} ({token.name})")
            else:
                token, secret = services.token_create(user=user, name=options["name"])
                self.stderr.write(f"token {token.prefix} ({token.name}) for {user.username}; shown once:")
                self.stdout.write(secret)
        except services.TokenError as exc:
            raise CommandError(str(exc)) from None

    def _list(self, user: User) -> None:
        for token in selectors.user_tokens(user=user):
            state = "revoked " + token.revoked_at.isoformat() if token.revoked_at else "active"
            if token.revoked_at is None and not token.active:
                state = "expired"
            used = token.last_used_at.isoformat() if token.last_used_at else "never"
            self.stdout.write(
                f"{token.prefix}\t{token.name}\t{state}\tcreated {token.created_at.isoformat()}\tused {used}"
            )
