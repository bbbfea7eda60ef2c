"""Revocation becomes an append-only record, and certified evidence is guarded by database triggers
(portal/certificates/immutability.py) on PostgreSQL and SQLite."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def revocations_copy(apps, schema_editor):
    Certificate = apps.get_model("certificates", "Certificate")
    Revocation = apps.get_model("certificates", "Revocation")
    for c in Certificate.objects.filter(revoked_at__isnull=False).select_related("revoked_by"):
        Revocation.objects.create(
            certificate=c,
            revoked_at=c.revoked_at,
            revoked_by=c.revoked_by,
            username=c.revoked_by.username if c.revoked_by else "unknown",
            reason=c.revoke_reason or "(no reason recorded)",
        )


def triggers_install(apps, schema_editor):
    """PostgreSQL only: on SQLite a later migration's table rebuild would trip over them, so there they
    are created after every migrate (portal/certificates/apps.py)."""
    from portal.certificates import immutability

    if schema_editor.connection.vendor == "postgresql":
        immutability.install(schema_editor.connection)


def triggers_drop(apps, schema_editor):
    from portal.certificates import immutability

    immutability.uninstall(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("certificates", "0002_campaign_issue_state"),
        ("runs", "0003_series_points_sha256"),
        ("inventory", "0002_cluster_check_settings"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Revocation",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("revoked_at", models.DateTimeField()),
                ("username", models.CharField(max_length=150)),
                ("reason", models.TextField()),
                (
                    "certificate",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="revocation",
                        to="certificates.certificate",
                    ),
                ),
                (
                    "revoked_by",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"ordering": ["-revoked_at", "-id"]},
        ),
        migrations.RunPython(revocations_copy, migrations.RunPython.noop),
        migrations.RemoveField(model_name="certificate", name="revoke_reason"),
        migrations.RemoveField(model_name="certificate", name="revoked_at"),
        migrations.RemoveField(model_name="certificate", name="revoked_by"),
        migrations.RunPython(triggers_install, triggers_drop),
    ]
