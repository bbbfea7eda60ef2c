"""Series points packed (portal/runs/packing.py) instead of jsonb lists, both ways.

Forward: every row's x and y are packed, then the jsonb columns go. Packing is lossless (pack()
only keeps a packed form after decoding it gave back the very same list), so `points_sha256`,
which certificates cite, still matches the points. Downsampled views are not made here: a chart
draws an older series from its points, as before (new series get their view when stored).
Backward: the packed points become jsonb lists again.

Certified series are frozen by database triggers (portal/certificates/immutability.py). This
changes how their points are stored, not the points: on PostgreSQL the user triggers of
runs_series are disabled inside this migration's transaction only (a failure rolls that back
too); on SQLite every kiln trigger is already dropped for the length of a migrate
(certificates/apps.py).
"""

from contextlib import contextmanager

from django.db import migrations, models

from portal.runs import packing

# Small batches: one 12 h burn-in curve is 43,200 points, ~3 MB as Python objects.
BATCH = 25


@contextmanager
def _guards_off(schema_editor):
    on_postgresql = schema_editor.connection.vendor == "postgresql"
    if on_postgresql:
        schema_editor.execute("ALTER TABLE runs_series DISABLE TRIGGER USER")
    try:
        yield
    finally:
        if on_postgresql:
            schema_editor.execute("ALTER TABLE runs_series ENABLE TRIGGER USER")


def _batches(queryset):
    last = 0
    while batch := list(queryset.filter(id__gt=last).order_by("id")[:BATCH]):
        yield batch
        last = batch[-1].id


def pack_points(apps, schema_editor):
    series = apps.get_model("runs", "Series")
    with _guards_off(schema_editor):
        for batch in _batches(series.objects.only("id", "x", "y")):
            for row in batch:
                x, y = list(row.x or []), list(row.y or [])
                row.x_packed, row.y_packed, row.count = packing.pack(x), packing.pack(y), len(y)
            series.objects.bulk_update(batch, ["x_packed", "y_packed", "count"])


def unpack_points(apps, schema_editor):
    series = apps.get_model("runs", "Series")
    with _guards_off(schema_editor):
        for batch in _batches(series.objects.only("id", "x_packed", "y_packed")):
            for row in batch:
                row.x, row.y = packing.unpack(row.x_packed), packing.unpack(row.y_packed)
            series.objects.bulk_update(batch, ["x", "y"])


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0007_run_metric"),
    ]

    operations = [
        migrations.AddField(
            model_name="series",
            name="count",
            field=models.PositiveIntegerField(default=0, help_text="How many points are stored."),
        ),
        migrations.AddField(
            model_name="series",
            name="x_packed",
            field=models.BinaryField(default=b"", help_text="x, packed (portal/runs/packing.py)."),
        ),
        migrations.AddField(
            model_name="series",
            name="y_packed",
            field=models.BinaryField(default=b"", help_text="y, packed; None (no reading) kept."),
        ),
        migrations.AddField(
            model_name="series",
            name="view_packed",
            field=models.BinaryField(
                blank=True,
                default=b"",
                help_text="x and y LTTB-downsampled to VIEW_POINTS (packing.pack_pair) for charts; empty when "
                "the series is no longer than that, or was stored before views existed.",
            ),
        ),
        migrations.RunPython(pack_points, unpack_points),
        migrations.RemoveField(model_name="series", name="x"),
        migrations.RemoveField(model_name="series", name="y"),
    ]
