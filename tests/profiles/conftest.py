"""Shared helpers for profile tests: fixture host trees and a fake command runner."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from edge_sdk.core.host import HostFacts, HostProbe
from edge_sdk.profiles import ProfileCatalog

REPO_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_PROFILES = REPO_ROOT / "device_profiles"
HOSTS_DIR = REPO_ROOT / "tests" / "fixtures" / "hosts"


class FakeRunner:
    """Stands in for `run_command`: returns `commands/<argv joined by _>.txt` below the host, else None."""

    def __init__(self, host_root: Path):
        self.host_root = host_root

    def __call__(self, argv: list[str]) -> str | None:
        path = self.host_root / "commands" / f"{'_'.join(argv)}.txt"
        return path.read_text(encoding="utf-8") if path.is_file() else None


def probe_fixture_host(name: str) -> HostFacts:
    """Facts of `tests/fixtures/hosts/<name>`, with commands answered from its `commands/` folder."""
    root = HOSTS_DIR / name
    assert root.is_dir(), f"fixture host {name} should exist at {root}"
    return HostProbe(root=root, run=FakeRunner(root)).facts()


@pytest.fixture
def hosts_dir() -> Path:
    return HOSTS_DIR


@pytest.fixture
def shipped_catalog() -> ProfileCatalog:
    return ProfileCatalog(SHIPPED_PROFILES)


@pytest.fixture
def facts_of() -> Callable[[str], HostFacts]:
    return probe_fixture_host
