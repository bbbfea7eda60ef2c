"""The demo app: no models, no pages; it owns the `kiln_demo` command."""

from __future__ import annotations

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "portal.demo"
    label = "demo"
    verbose_name = "Demo"
