"""The API's JSON parser: what the web hardening middleware refuses in forms, refused in JSON too."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from portal.middleware import unreadable

# Deeper nesting than any Kiln object has (threshold overrides are two levels): refused rather than
# walked, so a crafted body cannot make the check recurse without bound.
MAX_DEPTH = 32


def _check(value: Any, where: str, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, float) and not math.isfinite(value):
        raise ParseError(f"{where} holds a number too large to store (JSON has no infinity)")
    if isinstance(value, str):
        if what := unreadable(value):
            raise ParseError(f"{where} holds {what}, which Kiln does not accept.")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _check(key, f"a key of {where}", depth + 1)
            _check(item, f"{where}.{key}"[:80], depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check(item, where, depth + 1)


class StrictJSONParser(JSONParser):
    """JSON whose strings hold no NUL, other control character (tab and newlines aside) or lone
    surrogate (PostgreSQL cannot store a NUL, and a lone surrogate cannot be encoded to UTF-8), and
    whose numbers are finite (`1e400` parses as infinity, which jsonb refuses)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # json's decoder recurses once per nesting level
            raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
        _check(data, "the body")
        return data
