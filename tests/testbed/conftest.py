from __future__ import annotations

pytest_plugins = ["testbed.pytest_plugin"]
