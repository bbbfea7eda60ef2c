"""`migrate` as the tables' owner: Django's command, run as KILN_DATABASE_OWNER_URL's role when that
is set (portal/dbroles.py), so `kiln init` and `make up` need no flag."""

from __future__ import annotations

from typing import Any

from django.core.management.commands.migrate import Command as DjangoMigrate
from django.db import DEFAULT_DB_ALIAS

from portal import dbroles


class Command(DjangoMigrate):
    def handle(self, *args: Any, **options: Any) -> None:
        if options.get("database", DEFAULT_DB_ALIAS) == DEFAULT_DB_ALIAS:
            dbroles.owner_become()
        super().handle(*args, **options)
