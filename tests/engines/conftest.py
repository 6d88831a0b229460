"""Fixtures for engine tests: a fixed host so cache keys do not depend on the machine running the tests."""

from __future__ import annotations

import pytest

from edge_sdk.core.host import HostFacts

TEST_HOST = HostFacts(arch="x86_64", cpu_model="Test CPU @ 3.00GHz", cpu_flags=frozenset({"sse4_2", "avx2", "fma"}))


@pytest.fixture
def host_facts() -> HostFacts:
    return TEST_HOST
