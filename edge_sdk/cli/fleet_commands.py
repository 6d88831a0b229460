"""`edge-sdk fleet ls | deploy | resume | status | rollback | exec`: the operator's commands over MQTT.

They join the `fleet` group (fleet_group.py) beside keygen and sign (fleet_keys_commands); the options
they share, and their parsing, are in fleet_options.py. Every command that talks to devices takes
`--broker FILE.yaml` (MqttSettings: host, port, tls with the operator's certificate; relative paths
start from the file's folder, as in agent.yaml; or $EDGE_SDK_FLEET_BROKER); `resume` and `rollback`
default to the file `deploy` was given, which the state file keeps.
Rollouts live in the SQLite file given with `--state` (default ./rollouts.db), so a rollout
started by `deploy` can be watched with `status`, continued with `resume` after the operator
stopped, and undone with `rollback`. With `--key OPERATOR.key` (the key devices trust) a failing
wave, or `rollback`, takes each device back to the version it ran before with a rollback manifest
signed for that device alone; the key file's path is kept in the state file for `resume`/`rollback`.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from edge_sdk.core.errors import ConfigError, EdgeSDKError
from edge_sdk.fleet.operator.client import DeviceRecord, manifest_of
from edge_sdk.fleet.operator.deployment_file import artifact_file_problems, raise_problems
from edge_sdk.fleet.operator.rollout import RolloutRunner
from edge_sdk.fleet.operator.rollout_json import rollout_json
from edge_sdk.fleet.operator.rollout_plan import create_rollout
from edge_sdk.fleet.operator.rollout_rollback import roll_back_rollout
from edge_sdk.fleet.operator.rollout_store import Outcome, RolloutRecord, RolloutState, RolloutStore

from .context import CliContext
from .fleet_group import fleet
from .fleet_options import (
    broker_option,
    connected_operator,
    key_option,
    parse_rate,
    parse_selector,
    rollout_broker,
    rollout_broker_option,
    state_option,
)
from .output_format import OutputFormat, format_option

pass_cli = click.make_pass_decorator(CliContext)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what} ({exc.strerror})") from None


# ---------------------------------------------------------------- ls / exec


@fleet.command("ls")
@broker_option
@format_option(json_alias=True)
@click.option("--wait", "wait_s", default=1.0, show_default=True, help="Seconds to collect retained state.")
@pass_cli
def ls(ctx: CliContext, broker_file: Path, output_format: OutputFormat, wait_s: float) -> None:
    """Devices with their online state, profile, versions and health (from their retained state)."""
    with connected_operator(broker_file, wait_s) as operator:
        records = [r for r in operator.devices() if r.presence is not None or r.reported is not None]
    if output_format == "json":
        click.echo(json.dumps([_device_json(r) for r in records], indent=2))
        return
    out = ctx.listing(output_format)
    if not records and output_format == "table":
        out.line("no devices have published their state")
        return
    rows = []
    for r in records:
        p = r.presence
        rows.append(
            (
                r.device,
                r.online,
                r.profile or "-",
                str(r.active_version) if r.active_version is not None else "-",
                (p.health if p is not None and p.health else "-"),
                (p.sdk_version if p is not None and p.sdk_version else "-"),
                ",".join(f"{k}={v}" for k, v in sorted(r.labels.items())) or "-",
            )
        )
    out.table(("device", "online", "profile", "version", "health", "sdk", "labels"), rows, plain=True)
    online = sum(1 for r in records if r.online)
    out.line(f"{len(records)} device(s), {online} online")


def _device_json(record: DeviceRecord) -> dict[str, Any]:
    presence = record.presence
    reported = record.reported
    return {
        "device": record.device,
        "online": record.online,
        "profile": record.profile,
        "labels": record.labels,
        "active_version": record.active_version,
        "health": presence.health if presence is not None else None,
        "sdk_version": presence.sdk_version if presence is not None else None,
        "models": presence.models if presence is not None else [],
        "pipelines": presence.pipelines if presence is not None else [],
        "applied_revision": reported.applied_revision if reported is not None else None,
        "last_deploy": reported.last_deploy.model_dump(mode="json")
        if reported is not None and reported.last_deploy is not None
        else None,
    }


@fleet.command("exec")
@click.argument("device")
@click.argument("command")
@broker_option
@click.option("--args", "args_json", default="{}", help="Command arguments as a JSON object.")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for the answer.")
def exec_command(device: str, command: str, broker_file: Path, args_json: str, timeout: float) -> None:
    """Run COMMAND (ping, report, start, stop, set_profile, ...) on DEVICE and print its response."""
    try:
        args = json.loads(args_json)
    except ValueError as exc:
        raise ConfigError(f"--args: expected a JSON object, got invalid JSON ({exc})") from None
    if not isinstance(args, dict):
        raise ConfigError(f"--args: expected a JSON object, got {type(args).__name__}")
    with connected_operator(broker_file, settle_s=0.2) as operator:
        response = operator.request(device, command, args, timeout)
    click.echo(json.dumps(response.model_dump(mode="json"), indent=2))
    if not response.ok:
        raise SystemExit(1)


# ---------------------------------------------------------------- rollouts


@fleet.command("deploy")
@click.argument("manifest_path", metavar="MANIFEST.signed", type=click.Path(path_type=Path, dir_okay=False))
@broker_option
@state_option
@click.option(
    "--artifacts",
    "artifacts_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder with the manifest's inline artifacts (default: the manifest's folder).",
)
@click.option("--select", "select", multiple=True, help="device=ID, profile=NAME or label.KEY=VALUE (repeatable).")
@click.option("--first-wave", default=1, show_default=True, type=click.IntRange(min=1), help="Devices in wave 0.")
@click.option("--rate", "rate", default="60/min", show_default=True, help="Devices per minute after the first wave.")
@click.option(
    "--abort-threshold",
    default=0.2,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="Abort when a wave's failed share passes this.",
)
@key_option
@click.option(
    "--rollback-manifest",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Signed rollback manifest for a failing wave's devices (with --key: only for devices whose previous "
    "version is unknown).",
)
@click.option("--timeout", default=120.0, show_default=True, help="Seconds a device has to answer a deploy.")
@click.option("--offline-wait", default=0.0, show_default=True, help="Seconds to wait for offline devices at the end.")
@click.option("--id", "rollout_id", help="Rollout id (default: DEPLOYMENT-vVERSION-random).")
def deploy(
    manifest_path: Path,
    broker_file: Path,
    state_file: Path,
    artifacts_dir: Path | None,
    select: tuple[str, ...],
    first_wave: int,
    rate: str,
    abort_threshold: float,
    key_file: Path | None,
    rollback_manifest: Path | None,
    timeout: float,
    offline_wait: float,
    rollout_id: str | None,
) -> None:
    """Roll a signed deployment out: a first wave, then --rate, stopping at --abort-threshold."""
    envelope = _read(manifest_path, "signed manifest")
    rollback = _read(rollback_manifest, "rollback manifest") if rollback_manifest is not None else None
    rate_per_min = parse_rate(rate)
    selector = parse_selector(select)
    artifacts = (artifacts_dir or manifest_path.parent).resolve()
    try:
        manifest = manifest_of(envelope)
    except EdgeSDKError as exc:
        raise ConfigError(f"{manifest_path}: {exc}") from None
    raise_problems(str(manifest_path), artifact_file_problems(manifest, artifacts, str(manifest_path), require=True))
    with RolloutStore(state_file) as store, connected_operator(broker_file) as operator:
        try:
            new_id = create_rollout(
                operator,
                store,
                envelope,
                selector=selector,
                first_wave=first_wave,
                rate_per_min=rate_per_min,
                abort_threshold=abort_threshold,
                command_timeout_s=timeout,
                rollback_manifest=rollback,
                artifacts_dir=artifacts,
                rollout_id=rollout_id,
                signing_key=key_file,
                broker_file=broker_file,
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        record = store.load(new_id)
        click.echo(
            f"rollout {new_id}: version {record.spec.version} to {len(record.devices)} device(s), "
            f"{record.waves} wave(s), first wave {first_wave}, {rate_per_min:g}/min"
        )
        if rollback is None and key_file is None:
            click.echo(
                "note: no --key and no --rollback-manifest; a failing wave is rolled back through its previous "
                "desired state, which devices refuse when it is a lower version"
            )
        final = RolloutRunner(operator, store, new_id, offline_wait_s=offline_wait, on_change=_echo_change).run()
    _summary(final)


@fleet.command("resume")
@click.argument("rollout_id", metavar="ROLLOUT", required=False)
@rollout_broker_option
@state_option
@key_option
@click.option("--offline-wait", default=0.0, show_default=True, help="Seconds to wait for offline devices at the end.")
def resume(
    rollout_id: str | None, broker_file: Path | None, state_file: Path, key_file: Path | None, offline_wait: float
) -> None:
    """Continue a rollout after the operator stopped (devices already done are not sent it again).

    The broker file and signing key `deploy` was given are kept in the state file; --broker and --key override them.
    """
    _state_exists(state_file)
    with RolloutStore(state_file) as store:
        rollout_id = _rollout_id(store, rollout_id)
        broker = rollout_broker(broker_file, store.load(rollout_id).spec.broker_file, rollout_id)
        with connected_operator(broker) as operator:
            final = RolloutRunner(
                operator, store, rollout_id, offline_wait_s=offline_wait, on_change=_echo_change, signing_key=key_file
            ).run()
    _summary(final)


@fleet.command("status")
@click.argument("rollout_id", metavar="ROLLOUT", required=False)
@state_option
@format_option(json_alias=True)
@pass_cli
def status(ctx: CliContext, rollout_id: str | None, state_file: Path, output_format: OutputFormat) -> None:
    """A rollout's state and every device's outcome (the latest rollout when ROLLOUT is left out).

    Read from the state file only; `fleet resume` picks up what offline devices reported since.
    """
    _state_exists(state_file)
    with RolloutStore(state_file) as store:
        record = store.load(_rollout_id(store, rollout_id))
    if output_format == "json":
        click.echo(json.dumps(rollout_json(record), indent=2))
        return
    out = ctx.listing(output_format)
    out.line(
        escape(
            f"rollout {record.id}: {record.spec.deployment_id} version {record.spec.version}, {record.state.value}"
            + (f" ({record.reason})" if record.reason else "")
        )
    )
    rows = []
    for d in record.devices:
        when = d.finished_at or d.sent_at
        stamp = datetime.fromtimestamp(when).strftime("%H:%M:%S") if when else "-"
        rows.append((d.device, d.wave, d.outcome.value, d.via or "-", stamp, d.reason or ""))
    out.table(("device", "wave", "outcome", "via", "when", "reason"), rows, plain=True)
    out.line(_counts(record))


@fleet.command("rollback")
@click.argument("rollout_id", metavar="ROLLOUT", required=False)
@rollout_broker_option
@state_option
@key_option
def rollback(rollout_id: str | None, broker_file: Path | None, state_file: Path, key_file: Path | None) -> None:
    """Roll back every device a rollout activated, each to the version it ran before.

    With --key (or the key file given to `deploy`) each device gets a rollback manifest signed for it;
    else the rollout's --rollback-manifest, else its previous desired state. The broker file is the one
    `deploy` was given unless --broker says otherwise.
    """
    _state_exists(state_file)
    with RolloutStore(state_file) as store:
        rollout_id = _rollout_id(store, rollout_id)
        broker = rollout_broker(broker_file, store.load(rollout_id).spec.broker_file, rollout_id)
        with connected_operator(broker) as operator:
            record = roll_back_rollout(operator, store, rollout_id, signing_key=key_file)
    _summary(record)
    if any(d.outcome is Outcome.ACTIVE for d in record.devices):
        raise SystemExit(1)


# ---------------------------------------------------------------- output


def _state_exists(state_file: Path) -> None:
    if not state_file.exists():
        raise ConfigError(f"{state_file}: no rollout state file here (give --state)")


def _rollout_id(store: RolloutStore, given: str | None) -> str:
    if given:
        return given
    latest = store.latest()
    if latest is None:
        raise ConfigError(f"{store.path}: no rollouts yet")
    return latest


def _echo_change(device: str, outcome: Outcome, reason: str | None) -> None:
    click.echo(f"  {device}: {outcome.value}" + (f" ({reason})" if reason and outcome is not Outcome.SENT else ""))


def _counts(record: RolloutRecord) -> str:
    counts = record.counts()
    return f"{len(record.devices)} device(s): " + ", ".join(f"{n} {k}" for k, n in counts.items() if n)


def _summary(record: RolloutRecord) -> None:
    click.echo(f"rollout {record.id}: {record.state.value}" + (f" ({record.reason})" if record.reason else ""))
    click.echo(_counts(record))
    if record.state is RolloutState.ABORTED:
        raise SystemExit(1)


__all__ = ["fleet"]
