"""The public verify page's rate limit: uploads per client address in a fixed one-hour window, counted
in the database so that it holds across web processes and hosts (a per-process cache would let each
process grant the whole allowance again)."""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from portal.certificates.models import PublicVerifyCount

WINDOW = timedelta(hours=1)


def _client_key(address: str) -> str:
    """A keyed hash of the address: the table holds no visitor's address, and without the secret key
    a copy of it does not tell whether a given address came."""
    return hmac.new(str(settings.SECRET_KEY).encode(), address.encode(), hashlib.sha256).hexdigest()


def _counted(key: str, window: datetime, limit: int) -> bool:
    updated = PublicVerifyCount.objects.filter(client=key, window=window, count__lt=limit).update(count=F("count") + 1)
    return updated > 0


def public_verify_admit(*, address: str, now: datetime | None = None) -> int:
    """Count one public upload from `address`: 0 when it may go on, else the seconds until its hour's
    window ends (KILN_VERIFY_PUBLIC_PER_HOUR reached; nothing is counted then)."""
    now = now or timezone.now()
    window = now.replace(minute=0, second=0, microsecond=0)
    limit = int(settings.KILN_VERIFY_PUBLIC_PER_HOUR)
    key = _client_key(address)
    if limit > 0:
        with transaction.atomic():
            PublicVerifyCount.objects.filter(window__lt=window).delete()  # past hours count no more
            if _counted(key, window, limit):
                return 0
            try:
                with transaction.atomic():
                    PublicVerifyCount.objects.create(client=key, window=window, count=1)
                return 0
            except IntegrityError:  # the row is there: at the limit, or another upload made it just now
                if _counted(key, window, limit):
                    return 0
    return max(1, int((window + WINDOW - now).total_seconds()))
