"""What the agent remembers across restarts: applied desired revision, pipelines, profile, last deploy."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from edge_sdk.fleet.device.staging import write_file_atomically
from edge_sdk.fleet.wire.protocol import LastDeploy

log = logging.getLogger(__name__)


class _Stored(BaseModel):
    model_config = ConfigDict(extra="ignore")

    applied_revision: int = Field(0, ge=0)
    pipelines: list[str] = Field(default_factory=list)
    profile: str | None = None
    last_deploy: LastDeploy | None = None


class AgentState:
    """A small JSON file written atomically; a corrupt file is logged and starts over (the store keeps versions)."""

    def __init__(self, path: Path, stored: _Stored):
        self.path = path
        self.applied_revision = stored.applied_revision
        self.pipelines = list(stored.pipelines)
        self.profile = stored.profile
        self.last_deploy = stored.last_deploy

    @classmethod
    def load(cls, path: Path) -> AgentState:
        try:
            return cls(path, _Stored.model_validate_json(path.read_bytes()))
        except FileNotFoundError:
            return cls(path, _Stored())
        except (OSError, ValidationError, ValueError) as exc:
            log.warning("%s: unreadable agent state, starting from scratch (%s)", path, exc)
            return cls(path, _Stored())

    def save(self) -> None:
        stored = _Stored(
            applied_revision=self.applied_revision,
            pipelines=self.pipelines,
            profile=self.profile,
            last_deploy=self.last_deploy,
        )
        write_file_atomically(self.path, json.dumps(stored.model_dump(mode="json"), indent=1).encode())
