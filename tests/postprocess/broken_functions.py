"""A user module whose own import fails: it needs a package that is not installed."""

import edge_sdk_test_missing_dependency  # noqa: F401


def decode() -> None:
    """Never reached: the import above fails."""
