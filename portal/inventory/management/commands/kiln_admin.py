"""kiln_admin: make sure an administrator exists, and print how to log in.

The first time, a random password is generated and kept in the data directory (mode 0600), so the
README's one set-up command can print a working login without a password in git.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Ensure an admin user exists and print its login."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, **options: Any) -> None:
        username = options["username"]
        password_file = settings.DATA_DIR / f"{username}.password"
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is None:
            password = secrets.token_urlsafe(12)
            User.objects.create_superuser(username=username, email="", password=password)
            password_file.write_text(password + "\n")
            password_file.chmod(0o600)
        elif password_file.exists():
            password = password_file.read_text().strip()
        else:
            password = "(unchanged: set it with kiln manage changepassword)"
        self.stdout.write(f"login: {username} / {password}")
