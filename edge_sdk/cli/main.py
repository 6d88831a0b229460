"""`edge-sdk`: thin commands over the library. Errors print as one line; --debug shows the traceback."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from edge_sdk import __version__
from edge_sdk.core.errors import EdgeSDKError

from . import fleet_commands, fleet_keys_commands  # noqa: F401  (they register the fleet subcommands)
from .agent_commands import agent
from .context import CliContext
from .engine_commands import bench, build, cache
from .fleet_group import fleet
from .graph_commands import inspect
from .pipeline_commands import run
from .profile_commands import profiles
from .quantization_commands import compare, sensitivity
from .system_commands import doctor, schema


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
    _configure_logging(debug)
    ctx.obj = CliContext(profile_dir=profile_dir, cache_dir=cache_dir)


for command in (profiles, build, cache, bench, inspect, compare, sensitivity, run, doctor, schema, fleet, agent):
    cli.add_command(command)


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
        cli.main(args=args, prog_name="edge-sdk", standalone_mode=False)
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
