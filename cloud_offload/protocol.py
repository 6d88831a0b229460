"""The offload wire, shared by the edge agent and the cloud workers: topics, what a request and a
response carry, and the worker's load report.

Topics (under the fleet's tree, so the fleet's TLS + ACL broker guards them, deploy/mosquitto/acl):
- a device publishes requests to `edge/<device>/offload/req/<model key>/<part>`, QoS 1, with MQTT v5
  Response Topic `edge/<device>/offload/resp` and 16 bytes of Correlation Data;
- workers read them through the shared subscription `$share/<group>/edge/+/offload/req/#`, so each
  request reaches one worker of the group and adding workers scales out (standard MQTT v5);
- a worker answers on the request's Response Topic, which must be the requesting device's own
  (a device naming another device's topic is refused, not answered there);
- each worker keeps its load on the retained topic `offload/workers/<worker>`, cleared by its will.

A part is `whole` (the request holds a JPEG/WebP of the frame, `image` below, and the worker runs the
whole model with its own preprocessing) or `tail-<id>` (the request holds the cut's tensors and the
worker runs the tail after that cut). Both payloads are `tensor_codec` messages; the answer holds the
model's raw outputs, so the post-processor, labels and thresholds stay on the edge, plus the reserved
tensors below. The model key is the model file's digest with the preprocessing spec, so both sides
agree on what "the model" is without sending it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from edge_sdk.core.errors import EdgeSDKError
from edge_sdk.core.preprocess import PreprocessSpec
from edge_sdk.mqtt.topics import ROOT, check_identity
from edge_sdk.serving.model_cache import CacheStats

WHOLE = "whole"
TAIL_PREFIX = "tail-"
IMAGE_TENSOR = "@image"
"""A cloud request's only tensor: the encoded frame's bytes (uint8, 1-D)."""
ERROR_TENSOR = "@error"
"""In an answer instead of outputs: why the worker could not compute it (UTF-8 bytes)."""
WORKER_MS_TENSOR = "@worker_ms"
"""In an answer: [queued, compute] milliseconds at the worker (float32)."""
RESERVED_PREFIX = "@"
DEFAULT_GROUP = "offload-workers"
LOAD_ROOT = "offload/workers"
CORRELATION_BYTES = 16


class ProtocolError(EdgeSDKError):
    """A topic or message that does not follow the offload wire."""


@dataclass(frozen=True)
class RequestAddress:
    device: str
    model_key: str
    part: str


def request_topic(device: str, model_key: str, part: str) -> str:
    return f"{ROOT}/{check_identity(device)}/offload/req/{model_key}/{part}"


def response_topic(device: str) -> str:
    return f"{ROOT}/{check_identity(device)}/offload/resp"


def worker_subscription(group: str = DEFAULT_GROUP) -> str:
    return f"$share/{check_identity(group)}/{ROOT}/+/offload/req/#"


def load_topic(worker: str) -> str:
    return f"{LOAD_ROOT}/{check_identity(worker)}"


def parse_request_topic(topic: str) -> RequestAddress:
    levels = topic.split("/")
    if len(levels) != 6 or levels[0] != ROOT or levels[2:4] != ["offload", "req"]:
        raise ProtocolError(f"expected {ROOT}/<device>/offload/req/<model>/<part>, got {topic!r}")
    _root, device, _offload, _req, model_key, part = levels
    if part != WHOLE and not part.startswith(TAIL_PREFIX):
        raise ProtocolError(f"expected part '{WHOLE}' or '{TAIL_PREFIX}<id>', got {part!r}")
    return RequestAddress(device, model_key, part)


def model_key(model_sha256: str, preprocess: PreprocessSpec) -> str:
    """What both sides call one model: its file's digest and how frames are turned into its input."""
    spec = json.dumps(preprocess.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(f"{model_sha256}\n{spec}".encode()).hexdigest()[:16]


def tail_part(tensors: Sequence[str]) -> str:
    """The part name of the tail after the cut that sends these tensors (names may hold '/')."""
    return TAIL_PREFIX + hashlib.sha256("\n".join(sorted(tensors)).encode()).hexdigest()[:12]


def new_correlation() -> bytes:
    return os.urandom(CORRELATION_BYTES)


class ModelTimes(BaseModel):
    """What a worker measured for one model: the whole model and each tail it has ready."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    whole_ms: float | None = Field(None, description="Mean compute time of the whole model per frame.")
    tails_ms: dict[str, float] = Field(default_factory=dict, description="Mean compute time per ready tail.")


class WorkerLoad(BaseModel):
    """A worker's retained report on `offload/workers/<worker>`, every second and on each change."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    worker: str
    profile: str
    group: str = DEFAULT_GROUP
    queue: int = Field(0, ge=0, description="Requests waiting for a batch.")
    queue_ms: float = Field(0.0, ge=0, description="Mean wait of recent requests before their batch ran.")
    busy: float = Field(0.0, ge=0, description="Share of the last seconds spent computing (1.0 = saturated).")
    served: int = Field(0, ge=0)
    models: dict[str, ModelTimes] = Field(default_factory=dict, description="By model key.")
    cache: CacheStats | None = Field(None, description="The hot-model cache, when the worker has a memory budget.")
    at: float = Field(description="Unix time of the report.")
