"""What a scheduler hook printed is shown to viewers (the deliveries page): bounded, and with
anything that looks like a secret replaced."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.health.hooks import OUTPUT_MAX, hook_output

pytestmark = pytest.mark.django_db


def test_it_redacts_key_material_tokens_passwords_and_the_servers_own_secrets(settings) -> None:
    settings.SECRET_KEY = "django-insecure-this-is-the-site-secret"
    settings.KILN_METRICS_TOKEN = "metrics-bearer-token-0123"
    text = "\n".join(
        [
            "-----BEGIN OPENSSH PRIVATE KEY-----",
            "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU=",
            "-----END OPENSSH PRIVATE KEY-----",
            "error: token=abc123def password: hunter2 client-secret=xyz",
            "Authorization: Bearer eyJhbGciOi.payload.sig",
            "dial redis://:brokerpass@redis:6379/0 failed",
            f"SECRET_KEY is {settings.SECRET_KEY} and {settings.KILN_METRICS_TOKEN}",
            "scontrol: error: Invalid node name specified",
        ]
    )
    shown = hook_output(text)
    for secret in (
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
        "abc123def",
        "hunter2",
        "xyz",
        "eyJhbGciOi",
        "brokerpass",
        settings.SECRET_KEY,
        settings.KILN_METRICS_TOKEN,
    ):
        assert secret not in shown, secret
    assert "scontrol: error: Invalid node name specified" in shown, "the useful part stays"
    assert "[redacted" in shown


def test_it_keeps_a_bounded_head_and_counts_the_rest() -> None:
    shown = hook_output("x" * 50_000 + "\x1b[31m")
    assert len(shown) < OUTPUT_MAX + 60
    assert shown.endswith(f"[{50_000 - OUTPUT_MAX} more characters not kept]")
    assert "\x1b" not in hook_output("red \x1b[31mtext")


def test_viewers_read_the_scrubbed_output_on_the_deliveries_page(cluster, make_user, client, settings) -> None:
    from portal.health.models import SchedulerAction
    from portal.health.services.scheduler import _scheduler_action_close

    settings.KILN_METRICS_TOKEN = "metrics-bearer-token-0123"
    node = cluster.nodes.get(hostname="n01")
    action = SchedulerAction.objects.create(node=node, action="drain", argv=["scontrol"], status="running")
    _scheduler_action_close(action, "failed", hook_output("kubectl: token=metrics-bearer-token-0123 refused"))
    client.force_login(make_user("v", "viewer"))
    page = client.get(reverse("health:deliveries", args=["c1"])).content.decode()
    assert "token=[redacted]" in page and "metrics-bearer-token-0123" not in page


def test_a_webhook_error_answer_is_shown_redacted_and_short(settings) -> None:
    """The worker POSTs to the operator's URL; the start of an error answer is kept for viewers."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from portal.health import notify

    settings.SECRET_KEY = "django-insecure-this-is-the-site-secret"
    body = f"internal error: password=hunter2 key={settings.SECRET_KEY} " + "y" * 1000

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(500)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(notify.DeliveryError) as caught:
            notify.post_json(url=f"http://127.0.0.1:{server.server_address[1]}/hook", body={"a": 1})
    finally:
        server.shutdown()
        server.server_close()
    message = str(caught.value)
    assert message.startswith("HTTP 500") and "password=[redacted]" in message
    assert "hunter2" not in message and settings.SECRET_KEY not in message
    assert len(message) < 260
