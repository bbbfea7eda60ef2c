"""The `kiln` command (installed as a console script by pip; see pyproject.toml)."""
