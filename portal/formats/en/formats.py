"""Dates on pages: ISO 8601 with the time zone (pages used to mix "Dec. 1, 2026, 12:56 p.m." and
ISO). Django's English formats replaced, so a datetime printed without a filter reads the same as
the `when` filter's (portal/runs/templatetags/kiln.py). `T` is the zone's name (UTC, CET)."""

DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
