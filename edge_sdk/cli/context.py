"""What every command shares: where profiles and the engine cache live, and the consoles."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from edge_sdk.engines.cache import EngineCache
from edge_sdk.profiles import DeviceProfile, ProfileCatalog

from .output_format import Listing, OutputFormat

UNLIMITED_WIDTH = 1 << 20
"""The width of a console that is not a terminal: wide enough that no line is wrapped or cut."""


def make_console(*, stderr: bool = False) -> Console:
    """Rich's console on stdout (or stderr). On a terminal it fits the terminal's width; off one (a
    pipe, a file) it has no width to fit, so tables print whole and lines are never wrapped, whatever
    $COLUMNS says."""
    console = Console(highlight=False, stderr=stderr)
    if console.is_terminal:
        return console
    return Console(highlight=False, stderr=stderr, width=UNLIMITED_WIDTH)


@dataclass
class CliContext:
    profile_dir: Path | None = None
    cache_dir: Path | None = None
    console: Console = field(default_factory=make_console)
    err_console: Console = field(default_factory=lambda: make_console(stderr=True))

    @property
    def catalog(self) -> ProfileCatalog:
        return ProfileCatalog(self.profile_dir)

    @property
    def cache(self) -> EngineCache:
        return EngineCache(self.cache_dir)

    def profile(self, name: str | None) -> DeviceProfile:
        """The profile named with --profile, else the detected one."""
        return self.catalog.resolve(name)

    def listing(self, output_format: OutputFormat) -> Listing:
        """Where a command prints its tables and lines in `output_format` (output_format.py)."""
        return Listing(output_format, self.console, self.err_console)
