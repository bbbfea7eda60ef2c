"""Sending alerts: email through Django's email backend, webhooks as a JSON POST (stdlib urllib).

A webhook's URL often is its secret (a Slack incoming webhook's path): the POST follows no redirect,
to another origin or its own (worker/sameorigin.py), so the alert goes only where it was entered."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from django.core.mail import send_mail

from portal.health import conf
from worker import sameorigin


class DeliveryError(Exception):
    """The alert did not get through; the message says why (kept on the delivery record)."""


def post_json(*, url: str, body: dict[str, Any]) -> None:
    """POST `body` as JSON. Any non-2xx answer, a timeout or a refused connection is an error."""
    if not url.lower().startswith(("http://", "https://")):
        raise DeliveryError(f"not an http(s) URL: {url!r}")
    data = json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json", "User-Agent": "kiln-alerts"}
    )
    try:
        with sameorigin.opener().open(request, timeout=conf.webhook_timeout_s()) as response:
            response.read(65536)
    except sameorigin.RedirectRefused as exc:
        raise DeliveryError(f"{exc.reason}; the webhook URL should be the receiver's own") from None
    except urllib.error.HTTPError as exc:
        # Shown to viewers on the deliveries page: a little of the answer, with secrets redacted
        # (the URL is an operator's; what answers it may be any service the worker can reach).
        from portal.health.hooks import redact

        detail = redact(exc.read(300).decode(errors="replace"))[:200]
        raise DeliveryError(f"HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else "")) from None
    except urllib.error.URLError as exc:
        raise DeliveryError(f"cannot reach {url}: {exc.reason}") from None
    except TimeoutError:
        raise DeliveryError(f"no answer from {url} within {conf.webhook_timeout_s():g}s") from None
    except OSError as exc:
        raise DeliveryError(f"{url}: {exc}") from None


def send_email(*, to: list[str], payload: dict[str, Any]) -> None:
    if not to:
        raise DeliveryError("no recipients")
    subject = f"[Kiln {payload['cluster']}] {payload['node']}: {payload['from']} → {payload['to']}"
    lines = [payload["text"], ""]
    if payload.get("url"):
        lines.append(payload["url"])
    send_mail(subject, "\n".join(lines), conf.alert_from_email(), to, fail_silently=False)
