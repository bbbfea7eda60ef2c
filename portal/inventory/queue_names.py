"""What a Celery queue name may be: one rule for the cluster's field and the `kiln worker --queue`
option (importable before Django is set up: only django.core.validators)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator

# A Celery queue name: what a worker's `-Q` lists (comma-separated) and Redis keys carry, so no
# comma, space or colon; 63 characters like a cluster's name.
queue_validator = RegexValidator(
    r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$",
    "a queue name: letters, digits, '_', '.' and '-', not starting with '.' or '-'",
)
# Names Kombu and Celery keep for themselves in the same Redis database (the `unacked` hash and its
# index, `_kombu.binding.*`, `celeryev`/`*.celery.pidbox` for events and control replies, Celery's
# old default `celery`): a queue list under one of them would break every worker's broker.
RESERVED_QUEUE_PREFIXES = ("celery", "unacked", "_kombu")


def validate_queue(value: str) -> None:
    queue_validator(value)
    if value.lower().startswith(RESERVED_QUEUE_PREFIXES) or "pidbox" in value.lower():
        raise ValidationError(f"{value!r} is reserved for Celery's and Kombu's own use in the broker")
