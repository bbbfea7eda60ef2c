from tests.checks.probe_docs import probe_doc  # noqa


def test_it_imports() -> None:
    import checks
    assert "ecc_health" in checks.REGISTRY
