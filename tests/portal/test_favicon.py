"""Every page names its icon, served by the app: browsers stop asking for /favicon.ico (a 404 in each
page's log before)."""

from __future__ import annotations

import re

import pytest
from django.test import Client


@pytest.mark.django_db
def test_the_login_page_names_an_icon_that_the_app_serves(client: Client) -> None:
    page = client.get("/login/").content.decode()
    icon = re.search(r'<link rel="icon" href="([^"]+)"', page)
    assert icon is not None, page[:500]
    served = client.get(icon.group(1))
    assert served.status_code == 200
    assert b"<svg" in b"".join(served.streaming_content)  # type: ignore[attr-defined]
