"""A schedule's crontab expression, checked by Celery's own parser (the schedule services save it,
the fleet metrics read it)."""

from __future__ import annotations

from celery.schedules import crontab


class ScheduleError(ValueError):
    """The schedule cannot be saved as asked; the message says why."""


def crontab_parse(expression: str) -> dict[str, str]:
    """'m h dom mon dow' -> CrontabSchedule fields, validated by celery's own crontab parser."""

    parts = expression.split()
    if len(parts) != 5:
        raise ScheduleError(f"crontab {expression!r}: expected 5 fields (minute hour day-of-month month day-of-week)")
    fields = dict(zip(["minute", "hour", "day_of_month", "month_of_year", "day_of_week"], parts, strict=True))
    try:
        crontab(**fields)
    except (ValueError, TypeError) as exc:
        raise ScheduleError(f"crontab {expression!r}: {exc}") from None
    return fields
