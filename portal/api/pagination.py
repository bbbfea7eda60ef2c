from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    """NetBox's style: `?limit=&offset=`, answered as `count, next, previous, results`."""

    default_limit = 50  # the pages' list size (portal/runs/views.py, portal/certificates/views.py)
    max_limit = 1000  # NetBox's MAX_PAGE_SIZE default: bounded memory per request
