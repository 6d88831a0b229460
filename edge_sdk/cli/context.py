"""What every command shares: where profiles and the engine cache live, and the console."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from edge_sdk.engines.cache import EngineCache
from edge_sdk.profiles import DeviceProfile, ProfileCatalog


@dataclass
class CliContext:
    profile_dir: Path | None = None
    cache_dir: Path | None = None
    console: Console = field(default_factory=lambda: Console(highlight=False))
    err_console: Console = field(default_factory=lambda: Console(highlight=False, stderr=True))

    @property
    def catalog(self) -> ProfileCatalog:
        return ProfileCatalog(self.profile_dir)

    @property
    def cache(self) -> EngineCache:
        return EngineCache(self.cache_dir)

    def profile(self, name: str | None) -> DeviceProfile:
        """The profile named with --profile, else the detected one."""
        return self.catalog.resolve(name)
