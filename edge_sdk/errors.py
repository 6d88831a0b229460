"""One exception tree for the SDK. Messages say what was expected and what came."""

from __future__ import annotations


class EdgeSDKError(Exception):
    """Root of every error the SDK raises on purpose; the CLI prints these as one line."""


class ConfigError(EdgeSDKError):
    """A profile, pipeline or option is malformed or names something unknown."""


class ModelError(EdgeSDKError):
    """A model file is missing, corrupt, or does not fit the pipeline that uses it."""


class BackendUnavailableError(EdgeSDKError):
    """A backend or execution provider is not installed or cannot run on this host."""


class EngineBuildError(EdgeSDKError):
    """Turning a model into an engine failed."""


class EngineCacheError(EdgeSDKError):
    """The engine cache cannot be used (e.g. the directory is not writable)."""


class SourceError(EdgeSDKError):
    """A frame source cannot be opened or read."""


class SinkError(EdgeSDKError):
    """A result sink cannot be opened or written."""


class BrokerError(EdgeSDKError):
    """The MQTT broker refused or dropped the connection."""
