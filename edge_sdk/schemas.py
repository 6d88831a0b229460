"""JSON Schema of the YAML files users write, for editors (kept in the repo, checked by a test)."""

from __future__ import annotations

import json

from pydantic import BaseModel

from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.profiles.model import DeviceProfile

SCHEMAS: dict[str, type[BaseModel]] = {"profile": DeviceProfile, "pipeline": PipelineConfig}


def schema_json(kind: str) -> str:
    return json.dumps(SCHEMAS[kind].model_json_schema(), indent=2, sort_keys=True) + "\n"
