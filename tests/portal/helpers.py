"""Helpers for the portal unit tests: set result statuses and measurements directly."""

from __future__ import annotations

from portal.runs.models import CheckResult, Measurement, Run


def set_result(run: Run, hostname: str, item_key: str, status: str, reason: str = "", **fields: object) -> CheckResult:
    result = CheckResult.objects.get(run=run, node__hostname=hostname, item_key=item_key)
    result.status = status
    result.reason = reason
    for key, value in fields.items():
        setattr(result, key, value)
    result.save()
    return result


def add_measurement(result: CheckResult, name: str, **fields: object) -> Measurement:
    return Measurement.objects.create(result=result, name=name, **fields)
