"""URLs of one view for many ids from a single reverse(): a chart of 4,000 points, each linking to
its result, spent a third of the node page's time in Django's URL resolver."""

from __future__ import annotations

from collections.abc import Callable

from django.urls import reverse

# A value no URL of the portal holds elsewhere, reversed in place of the id then swapped for each one.
_MARK = 918273645546372819


def url_maker(viewname: str, *before: object) -> Callable[[int], str]:
    """`make(pk) == reverse(viewname, args=[*before, pk])` for an integer `pk`, without reversing
    again: the URL is reversed once with a marker for the id."""
    prefix, found, suffix = reverse(viewname, args=[*before, _MARK]).partition(str(_MARK))
    if not found:  # the id is not in the path (a query string, a converter that rewrites it)
        return lambda pk: reverse(viewname, args=[*before, pk])
    return lambda pk: f"{prefix}{int(pk)}{suffix}"
