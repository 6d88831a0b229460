"""Private Mosquitto brokers for the MQTT tests (see tests/broker.py) and a unique topic prefix per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker import BrokerFactory, broker_factory_fixture, unique_topic_prefix


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[BrokerFactory]:
    """start_broker(tls=..., passwords=..., acl=..., persistence=...) -> a running MosquittoBroker."""
    yield from broker_factory_fixture(tmp_path / "brokers")


@pytest.fixture
def topic_prefix(request: pytest.FixtureRequest) -> str:
    return unique_topic_prefix(request.node.name)
