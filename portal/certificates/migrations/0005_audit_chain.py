"""The audit log becomes a hash chain (auditchain.py): new columns, `at` set before the insert, and
the events already there chained in id order."""

from typing import Any

import django.utils.timezone
from django.db import migrations, models


def chain_existing(apps: Any, schema_editor: Any) -> None:
    from portal.certificates.auditchain import event_digest

    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        # The append-only trigger refuses this one-time fill; post_migrate installs it again (apps.py).
        schema_editor.execute("DROP TRIGGER IF EXISTS kiln_guard_audit_upd ON certificates_auditevent")
    AuditEvent = apps.get_model("certificates", "AuditEvent")
    prev = ""
    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        digest = event_digest(
            prev=prev, campaign_id=event.campaign_id, at=event.at, username=event.username,
            action=event.action, detail=event.detail,
        )  # fmt: skip
        AuditEvent.objects.filter(pk=event.pk).update(prev_sha256=prev, sha256=digest)
        prev = digest


class Migration(migrations.Migration):
    dependencies = [
        ("certificates", "0004_certificate_verdict_choices"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="prev_sha256",
            field=models.CharField(blank=True, editable=False, max_length=64),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="sha256",
            field=models.CharField(blank=True, editable=False, max_length=64),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="at",
            field=models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False),
        ),
        migrations.RunPython(chain_existing, migrations.RunPython.noop),
    ]
