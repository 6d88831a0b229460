"""The steps of provisioning a box, each one change that knows whether it is already done.

Every step has `describe()` (one line for the plan), `done(root)` (nothing left to change) and
`apply(root)`, which changes the box below `root` only when the step is not done and says which it
was. `root` is `/` on the box itself; under any other root (a throw-away folder) nothing outside it is
touched: owners are not set and no user is created.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from edge_sdk.core.errors import EdgeSDKError

from .provision_config import SERVICE_GROUPS, SERVICE_USER, STATE_DIR, on_box

Change = Literal["changed", "unchanged", "skipped"]


@dataclass(frozen=True)
class Outcome:
    change: Change
    detail: str = ""


def is_real(root: Path) -> bool:
    return root.resolve() == Path("/")


class Step(ABC):
    @abstractmethod
    def describe(self) -> str:
        """What the step makes true, in one line."""

    @abstractmethod
    def done(self, root: Path) -> bool:
        """Whether the box below `root` is already as the step would leave it."""

    def skipped(self, root: Path) -> str | None:
        """Why the step does not run below `root`, or None."""
        return None

    def apply(self, root: Path) -> Outcome:
        reason = self.skipped(root)
        if reason is not None:
            return Outcome("skipped", reason)
        if self.done(root):
            return Outcome("unchanged")
        self.change(root)
        return Outcome("changed")

    @abstractmethod
    def change(self, root: Path) -> None:
        """Make the step true (only called when it is not)."""


def _owner_matches(path: Path, user: str, group: str) -> bool:
    import grp
    import pwd

    stat = path.stat()
    try:
        return pwd.getpwuid(stat.st_uid).pw_name == user and grp.getgrgid(stat.st_gid).gr_name == group
    except KeyError:
        return False


@dataclass(frozen=True)
class OwnedPath:
    """A path's mode and owner; the owner is set on the box itself only."""

    path: PurePosixPath
    mode: int
    user: str = "root"
    group: str = "root"

    def matches(self, target: Path, root: Path) -> bool:
        if (target.stat().st_mode & 0o7777) != self.mode:
            return False
        return not is_real(root) or _owner_matches(target, self.user, self.group)

    def settle(self, target: Path, root: Path) -> None:
        os.chmod(target, self.mode)
        if is_real(root):
            shutil.chown(target, self.user, self.group)

    def owner_text(self) -> str:
        return f"{self.mode:04o} {self.user}:{self.group}"


@dataclass(frozen=True)
class CreateUser(Step):
    """The service's system user and group, a member of the device groups."""

    def describe(self) -> str:
        return (
            f"create the system user {SERVICE_USER} (its own group, member of {', '.join(SERVICE_GROUPS)}, "
            f"home {STATE_DIR}, no login shell)"
        )

    def skipped(self, root: Path) -> str | None:
        if is_real(root):
            return None
        return "under --root no user is created (useradd --root chroots, which needs root); the box's run creates it"

    def done(self, root: Path) -> bool:
        import grp
        import pwd

        try:
            pwd.getpwnam(SERVICE_USER)
            return all(SERVICE_USER in grp.getgrnam(name).gr_mem for name in SERVICE_GROUPS)
        except KeyError:
            return False

    def change(self, root: Path) -> None:
        for group in SERVICE_GROUPS:  # a box without a GPU may lack `render`
            if _run(["getent", "group", group], check=False) != 0:
                _run(["groupadd", "--system", group])
        import pwd

        try:
            pwd.getpwnam(SERVICE_USER)
        except KeyError:
            _run(
                ["useradd", "--system", "--user-group", "--groups", ",".join(SERVICE_GROUPS)]
                + ["--home-dir", str(STATE_DIR), "--shell", "/usr/sbin/nologin", SERVICE_USER]
            )
            return
        _run(["usermod", "--append", "--groups", ",".join(SERVICE_GROUPS), SERVICE_USER])


@dataclass(frozen=True)
class MakeFolder(Step):
    owned: OwnedPath

    def describe(self) -> str:
        return f"folder {self.owned.path} ({self.owned.owner_text()})"

    def done(self, root: Path) -> bool:
        target = on_box(root, self.owned.path)
        return target.is_dir() and not target.is_symlink() and self.owned.matches(target, root)

    def change(self, root: Path) -> None:
        target = on_box(root, self.owned.path)
        target.mkdir(parents=True, exist_ok=True)
        self.owned.settle(target, root)


@dataclass(frozen=True)
class WriteFile(Step):
    """A file with exactly `content` (a copy of `source`, or written by the SDK)."""

    owned: OwnedPath
    content: bytes
    source: str = "written by edge-sdk"

    def describe(self) -> str:
        return f"file {self.owned.path} ({self.source}; {self.owned.owner_text()})"

    def done(self, root: Path) -> bool:
        target = on_box(root, self.owned.path)
        if not target.is_file() or target.is_symlink():
            return False
        return target.read_bytes() == self.content and self.owned.matches(target, root)

    def change(self, root: Path) -> None:
        target = on_box(root, self.owned.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(self.content)
            self.owned.settle(Path(temporary), root)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


@dataclass(frozen=True)
class EnableUnit(Step):
    """The link `systemctl enable` makes: TARGET.wants/UNIT -> the unit file (the template for an instance)."""

    unit: str
    unit_file: PurePosixPath
    target: str

    @property
    def link(self) -> PurePosixPath:
        return self.unit_file.parent / f"{self.target}.wants" / self.unit

    def describe(self) -> str:
        return f"enable {self.unit}: link {self.link} -> {self.unit_file}"

    def done(self, root: Path) -> bool:
        link = on_box(root, self.link)
        return link.is_symlink() and os.readlink(link) == str(self.unit_file)

    def change(self, root: Path) -> None:
        link = on_box(root, self.link)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(str(self.unit_file))


def systemd_running() -> bool:
    """Whether this machine was booted with systemd (as `sd_booted()` checks)."""
    return Path("/run/systemd/system").is_dir()


@dataclass(frozen=True)
class StartUnits(Step):
    """On the box itself, with systemd running: `systemctl daemon-reload`, then start what is not active,
    without waiting (the agent waits for a first-boot enrollment, which waits for the fleet)."""

    units: tuple[str, ...]

    def describe(self) -> str:
        return f"systemctl daemon-reload; start {', '.join(self.units)}"

    def skipped(self, root: Path) -> str | None:
        if not is_real(root):
            return "under --root nothing is started"
        if not systemd_running():
            return "systemd is not running here (not PID 1): the enabled units start at the next boot"
        return None

    def done(self, root: Path) -> bool:
        return all(_run(["systemctl", "is-active", "--quiet", unit], check=False) == 0 for unit in self.units)

    def change(self, root: Path) -> None:
        _run(["systemctl", "daemon-reload"])
        _run(["systemctl", "start", "--no-block", *self.units])


def _run(command: list[str], *, check: bool = True) -> int:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EdgeSDKError(f"`{' '.join(command)}` failed: {exc}") from None
    if check and done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise EdgeSDKError(f"`{' '.join(command)}` failed: {last[0]}")
    return done.returncode
