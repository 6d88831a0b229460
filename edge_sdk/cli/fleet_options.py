"""The options the `edge-sdk fleet` commands (fleet_commands.py) share, and what they turn into.

`--broker FILE.yaml` gives `connected_operator`, a `FleetOperator` whose registry holds the retained
state; `--key` and `--state` name the operator's signing key and the rollouts' SQLite file; `--rate`
and `--select` are read by `parse_rate` and `parse_selector`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from edge_sdk.core.errors import ConfigError
from edge_sdk.fleet.operator.client import FleetOperator
from edge_sdk.fleet.operator.selection import parse_selector
from edge_sdk.fleet.wire.broker_file import load_broker_file
from edge_sdk.mqtt import MqttClient

__all__ = ["parse_selector"]  # the --select parser, shared with the dashboard's filter

_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(?:/\s*(min|m|s|sec|h|hour))?\s*$")


def broker_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--broker",
        "broker_file",
        required=True,
        envvar="EDGE_SDK_FLEET_BROKER",
        type=click.Path(path_type=Path, dir_okay=False),
        help="Broker settings YAML (MqttSettings, with the operator's TLS certificate); or $EDGE_SDK_FLEET_BROKER.",
    )(command)


def rollout_broker_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--broker` for commands on a recorded rollout: optional, the file `deploy` used is kept in the state."""
    return click.option(
        "--broker",
        "broker_file",
        envvar="EDGE_SDK_FLEET_BROKER",
        type=click.Path(path_type=Path, dir_okay=False),
        help="Broker settings YAML; default: the one the rollout was deployed with (kept in --state).",
    )(command)


def rollout_broker(given: Path | None, recorded: Path | None, rollout_id: str) -> Path:
    """The broker file for a recorded rollout: `given` (--broker) wins, else the one `deploy` kept."""
    if given is not None:
        return given
    if recorded is None:
        raise ConfigError(
            f"rollout {rollout_id} has no broker file recorded (deployed by an older edge-sdk): give --broker"
        )
    if not recorded.is_file():
        raise ConfigError(
            f"rollout {rollout_id} was deployed with the broker file {recorded}, which is gone: give --broker"
        )
    return recorded


def key_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--key",
        "key_file",
        type=click.Path(path_type=Path, dir_okay=False),
        help="Operator's Ed25519 private key (PEM, the one devices trust): signs a rollback manifest per device "
        "back to the version it ran before the rollout.",
    )(command)


def state_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--state",
        "state_file",
        default=Path("rollouts.db"),
        show_default=True,
        type=click.Path(path_type=Path, dir_okay=False),
        help="SQLite file holding rollouts (created when missing).",
    )(command)


@contextmanager
def connected_operator(broker_file: Path, settle_s: float = 1.0) -> Iterator[FleetOperator]:
    """An operator connected with `broker_file`'s settings (paths from its folder), registry from retained state."""
    client = MqttClient(load_broker_file(broker_file))
    client.connect()
    try:
        operator = FleetOperator(client).start()
        operator.settle(quiet_s=min(0.5, settle_s), timeout=settle_s + 5)
        yield operator
        operator.close()
    finally:
        client.disconnect(flush_timeout=5.0)


def parse_rate(text: str) -> float:
    """'60/min', '2/s', '600/h' or a plain number (per minute) -> devices per minute."""
    match = _RATE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ConfigError(f"--rate: expected a positive rate such as 10/min, 1/s or 600/h, got {text!r}")
    value, unit = float(match.group(1)), match.group(2) or "min"
    return value * 60 if unit in ("s", "sec") else value / 60 if unit in ("h", "hour") else value
