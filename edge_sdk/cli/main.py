"""`edge-sdk`: thin commands over the library. Errors print as one line; --debug shows the traceback."""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from edge_sdk import __version__
from edge_sdk.core.errors import EdgeSDKError

from .context import CliContext
from .entry import release_startup_guard

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

COMMANDS: dict[str, tuple[str, ...]] = {
    "profiles": ("edge_sdk.cli.profile_commands", "profiles"),
    "build": ("edge_sdk.cli.engine_commands", "build"),
    "cache": ("edge_sdk.cli.engine_commands", "cache"),
    "bench": ("edge_sdk.cli.engine_commands", "bench"),
    "inspect": ("edge_sdk.cli.graph_commands", "inspect"),
    "compare": ("edge_sdk.cli.quantization_commands", "compare"),
    "sensitivity": ("edge_sdk.cli.quantization_commands", "sensitivity"),
    "run": ("edge_sdk.cli.pipeline_commands", "run"),
    "detect": ("edge_sdk.cli.detect_commands", "detect"),
    "doctor": ("edge_sdk.cli.system_commands", "doctor"),
    "schema": ("edge_sdk.cli.system_commands", "schema"),
    "fleet": (
        "edge_sdk.cli.fleet_group",
        "fleet",
        "edge_sdk.cli.fleet_commands",
        "edge_sdk.cli.fleet_keys_commands",
        "edge_sdk.cli.fleet_dashboard_commands",
        "edge_sdk.cli.fleet_enroll_commands",
    ),
    "agent": ("edge_sdk.cli.agent_commands", "agent"),
    "device": (
        "edge_sdk.cli.device_group",
        "device",
        "edge_sdk.cli.device_commands",
        "edge_sdk.cli.device_enroll_commands",
    ),
}
"""Each command: its module and name, then the modules that add its subcommands. Only the command in
use is imported, so `edge-sdk run` loads neither the fleet, the graph tools (onnx) nor the INT8 toolkit."""

HANDLES_STOP_SIGNALS = frozenset({"run", "detect"})
"""Commands that install their own SIGINT/SIGTERM handlers first thing: the start-up guard stays until
they do, so no signal falls between the two. Every other command gets Python's handlers back once its
module is loaded (a Ctrl-C is then a KeyboardInterrupt: one line, exit 130)."""


PLUGIN_GROUP = "edge_sdk.commands"
"""Commands of packages built on the SDK (cloud_offload's `offload`), by entry point: the SDK never imports them."""


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*COMMANDS, *sorted(point.name for point in _plugins() if point.name not in COMMANDS)]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            plugin = next((point for point in _plugins() if point.name == name), None)
            return None if plugin is None else plugin.load()
        module, attribute, *registering = COMMANDS[name]
        command: click.Command = getattr(importlib.import_module(module), attribute)
        for subcommands in registering:
            importlib.import_module(subcommands)
        return command


def _plugins() -> list[EntryPoint]:
    from importlib.metadata import entry_points  # only for a name not in COMMANDS: `run` never scans

    return list(entry_points(group=PLUGIN_GROUP))


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edge-sdk")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option(
    "--profile-dir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar="EDGE_SDK_PROFILE_DIR",
    show_envvar=True,
    help="Folder of device profile YAML files (default: the shipped device_profiles/).",
)
@click.option(
    "--cache-dir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar="EDGE_SDK_CACHE_DIR",
    show_envvar=True,
    help="Engine cache folder (default: $XDG_CACHE_HOME/edge-sdk/engines).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, profile_dir: Path | None, cache_dir: Path | None) -> None:
    """Deploy vision models onto edge boxes."""
    if ctx.invoked_subcommand not in HANDLES_STOP_SIGNALS:
        release_startup_guard()
    _configure_logging(debug)
    ctx.obj = CliContext(profile_dir=profile_dir, cache_dir=cache_dir)


class _LowercaseLevel(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


def _configure_logging(debug: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s") if debug else _LowercaseLevel()
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.WARNING)
    logging.getLogger("edge_sdk").setLevel(logging.DEBUG if debug else logging.INFO)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        try:
            cli.main(args=args, prog_name="edge-sdk", standalone_mode=False)
        finally:  # `run`'s handlers put the guard back when they leave, however the command ends
            release_startup_guard()
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except EdgeSDKError as exc:
        if debug:
            raise
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # an SDK bug: still one line unless asked for the traceback
        if debug:
            raise
        click.echo(f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
