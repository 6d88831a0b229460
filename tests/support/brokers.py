"""The one `start_broker` fixture (and `topic_prefix`), registered for every test by tests/conftest.py.

    def test_x(start_broker: BrokerFactory) -> None:
        broker = start_broker(tls=True, passwords={"alice": "secret"})

The brokers are tools/harness/broker.py's private Mosquitto processes; a test that uses `start_broker`,
directly or through another fixture, is marked `broker` (tests/conftest.py's SERVER_FIXTURES).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.harness.broker import BrokerFactory, find_mosquitto


def unique_topic_prefix(test_name: str) -> str:
    """A topic prefix no other test (or earlier run) uses."""
    return f"edge-sdk-test/{re.sub(r'[^A-Za-z0-9_-]', '_', test_name)}/{uuid.uuid4().hex[:8]}"


def broker_factory(folder: Path) -> Iterator[BrokerFactory]:
    """A factory of private brokers in `folder`: skips without the binary, stops every broker afterwards."""
    if find_mosquitto() is None:
        pytest.skip("needs the mosquitto binary (apt-get install mosquitto)")
    with BrokerFactory(folder) as factory:
        yield factory


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[BrokerFactory]:
    """start_broker(tls=..., passwords=..., acl=..., persistence=...) -> a running MosquittoBroker."""
    yield from broker_factory(tmp_path / "brokers")


@pytest.fixture
def topic_prefix(request: pytest.FixtureRequest) -> str:
    return unique_topic_prefix(request.node.name)
