"""`manage.py kiln_init`: makes the data folder (KILN_DATA_DIR), the generated secret key, the
credential key and the /metrics bearer token. Settings never write at import; `make up` runs this
first, and so does any fresh deployment."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand

from portal.datadir import credential_key_read, init_data_dir, metrics_token_read, secret_key_read


class Command(BaseCommand):
    help = (
        "Create KILN_DATA_DIR's folders and, unless KILN_SECRET_KEY / KILN_CREDENTIAL_KEY / KILN_METRICS_TOKEN "
        "are set, the generated secret key, credential key and /metrics bearer token."
    )
    # Runs before the secret key exists, which the system checks would refuse (kiln.E001).
    requires_system_checks: list[str] = []

    def handle(self, *args: Any, **options: Any) -> None:
        data_dir = settings.DATA_DIR
        # A key that is set but is not the file's came from KILN_SECRET_KEY: no file is made then.
        try:
            key = settings.SECRET_KEY
        except ImproperlyConfigured:  # what Django raises for an empty key: none is set yet
            key = ""
        from_env = bool(key) and key != secret_key_read(data_dir)
        credential = settings.KILN_CREDENTIAL_KEY
        credential_from_env = bool(credential) and credential != credential_key_read(data_dir)
        token = settings.KILN_METRICS_TOKEN
        token_from_env = bool(token) and token != metrics_token_read(data_dir)
        made = init_data_dir(
            data_dir, secret_key=not from_env, credential_key=not credential_from_env, metrics_token=not token_from_env
        )
        for path in made:
            self.stdout.write(f"created {path}")
        if not made:
            self.stdout.write(f"{data_dir}: already set up")
