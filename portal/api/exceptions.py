"""Every API error in JSON: `{"detail": "..."}`, plus `errors` (field -> messages) for invalid input.

The services' own errors (bad node sets, plans that cannot start, closed campaigns...) are 400 with
their message; a delete refused because evidence refers to the object is 409."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import ProtectedError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from portal.api.services import TokenError
from portal.certificates.services import CampaignError
from portal.health.services.schedules import ScheduleError
from portal.inventory.services import InventoryError
from portal.runs.snapshot import RunStartError

SERVICE_ERRORS = (InventoryError, RunStartError, CampaignError, TokenError, ScheduleError)


def _first_message(errors: Any) -> str:
    if isinstance(errors, dict):
        for field, messages in errors.items():
            text = _first_message(messages)
            return text if field == "non_field_errors" else f"{field}: {text}"
    if isinstance(errors, list) and errors:
        return _first_message(errors[0])
    return str(errors)


def _translate(exc: Exception) -> Exception:
    if isinstance(exc, SERVICE_ERRORS):
        return exceptions.ValidationError({"non_field_errors": [str(exc)]})
    if isinstance(exc, DjangoValidationError):
        return exceptions.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
    if isinstance(exc, ProtectedError):
        names = ", ".join(sorted({str(type(o)._meta.verbose_name) for o in exc.protected_objects}))
        conflict = exceptions.APIException(f"Cannot delete it: {names} refer to it (kept as evidence).")
        conflict.status_code = status.HTTP_409_CONFLICT
        return conflict
    return exc


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = exception_handler(_translate(exc), context)
    if response is None:
        return None  # a bug: Django's 500 handling (logged), never a traceback to the client
    if isinstance(response.data, dict) and "detail" in response.data:
        return response
    errors = response.data
    response.data = {"detail": f"Invalid input: {_first_message(errors)}", "errors": errors}
    return response


@csrf_exempt  # it changes nothing; without this a POST got Django's HTML CSRF page (403), not a JSON 404
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any /api/ path no endpoint matches: JSON, like every other API answer."""
    return JsonResponse({"detail": "Not found: no such API endpoint (see /api/v1/docs/)."}, status=404)
