"""Read the password a `MqttSettings` names (environment variable or file), at connect time."""

from __future__ import annotations

import os

from edge_sdk.core.errors import ConfigError

from .settings import MqttSettings


def read_password(settings: MqttSettings) -> str | None:
    """The broker password, or None when the settings name none.

    Raises ConfigError when the named variable is unset or the file cannot be read.
    """
    if settings.password_env is not None:
        value = os.environ.get(settings.password_env)
        if value is None:
            raise ConfigError(
                f"MQTT password: expected environment variable {settings.password_env} to be set, got nothing"
            )
        return value
    if settings.password_file is not None:
        path = settings.password_file.expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"MQTT password: cannot read {path} ({exc.strerror})") from None
        lines = text.splitlines()
        return lines[0].strip() if lines else ""
    return None
