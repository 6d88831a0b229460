"""Forwarding to a Triton Inference Server: the worker stays the edge's front (MQTT, deadlines, JPEG
decoding, the pipeline's preprocessing, batching into calls), and a model mapped to Triton is computed
there through tritonclient (gRPC or HTTP) instead of by a local engine. Users who already run Triton
keep it, with its own dynamic batcher and instances.

`TritonRunner` has the worker's `TailRunner` shape (`inputs`, `infer`), so `ServedModel` runs it like
any engine. It checks the model once at start (reachable, ready, the input the pipeline feeds, the
outputs its post-processing reads) and every answer against that (names, dtypes, ranks, one row per
frame asked for): a Triton that is down or answers garbage raises `TritonError`, which the worker
answers as an error for the requests of that call, exactly as for a failed engine; the edge then
computes those frames itself, as for a lost worker.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any, Literal
from urllib.parse import urlsplit

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from edge_sdk.core.errors import ConfigError, EdgeSDKError, first_line
from edge_sdk.core.preprocess import Preprocessor
from edge_sdk.core.tensor_meta import Dim, TensorMeta, select_input
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.postprocess import build_postprocessor

from .protocol import model_key
from .worker_models import ModelPreparer, ModelSpec, ServedModel

log = logging.getLogger("cloud_offload.triton")

DEFAULT_PORTS = {"grpc": 8001, "http": 8000}
TRITON_DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}


class TritonError(EdgeSDKError):
    """Triton cannot be reached, has no such model, or answered something the pipeline cannot use."""


class TritonSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(description="grpc://HOST[:PORT] (default port 8001) or http://HOST[:PORT] (8000).")
    models: dict[str, str] = Field(
        default_factory=dict,
        description="Pipeline name -> Triton model name; a pipeline not named here is served by its own name.",
    )
    timeout_s: float = Field(5.0, gt=0, le=600, description="Longest wait for one Triton call.")
    tails: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="Pipeline name -> {cut tensor: Triton model}: the split tails Triton computes "
        "(triton_tails.py). With tails and no `models`, whole models run in the worker.",
    )

    @field_validator("url")
    @classmethod
    def _scheme(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise ValueError(f"expected grpc://HOST[:PORT] or http://HOST[:PORT], got {url!r}")
        try:
            parts.port  # noqa: B018 (raises on a bad port)
        except ValueError as exc:
            raise ValueError(f"bad port in {url!r}: {exc}") from None
        return url

    @property
    def protocol(self) -> Literal["grpc", "http"]:
        return "grpc" if urlsplit(self.url).scheme == "grpc" else "http"

    @property
    def address(self) -> str:
        """host:port, as tritonclient takes it."""
        parts = urlsplit(self.url)
        return f"{parts.hostname}:{parts.port or DEFAULT_PORTS[self.protocol]}"

    def model_for(self, pipeline: str) -> str:
        return self.models.get(pipeline, pipeline)

    def forwards_whole(self, pipeline: str) -> bool:
        """Whether Triton computes the pipeline's whole model: every pipeline's without --triton-model
        or --triton-tail, else those --triton-model names."""
        return pipeline in self.models or not (self.models or self.tails)


def triton_settings(
    url: str | None,
    mapping: Sequence[str],
    timeout_s: float,
    pipelines: Sequence[PipelineConfig],
    tails: dict[str, dict[str, str]] | None = None,
) -> TritonSettings | None:
    """The worker command's --triton, --triton-model PIPELINE=MODEL, --triton-tail (parsed: `tails`) and
    --triton-timeout-s; None without a URL. ConfigError saying what is wrong with them."""
    if url is None:
        if mapping or tails:
            option = "--triton-model" if mapping else "--triton-tail"
            raise ConfigError(f"{option} needs --triton URL (the server that serves the model)")
        return None
    names = [config.name for config in pipelines]
    models: dict[str, str] = {}
    for item in mapping:
        pipeline, sep, model = item.partition("=")
        if not sep or not pipeline or not model:
            raise ConfigError(f"--triton-model: expected PIPELINE=MODEL, got {item!r}")
        if pipeline not in names:
            raise ConfigError(f"--triton-model {item}: no pipeline named {pipeline!r} is served (pipelines: {names})")
        models[pipeline] = model
    try:
        return TritonSettings(url=url, models=models, timeout_s=timeout_s, tails=tails or {})
    except ValidationError as exc:
        raise ConfigError(f"--triton: {exc.errors()[0]['msg']}") from None


class TritonRunner:
    """One Triton model, called like an engine: `inputs`, `outputs`, `infer(feed)`; one tritonclient
    client per calling thread (neither client is safe to share across threads)."""

    def __init__(self, settings: TritonSettings, model: str, expected: Sequence[TensorMeta] = ()):
        """Checks the server and the model; TritonError naming the URL when either is not usable.
        `expected`: the outputs the local model has, whose ranks the answers are brought to (Triton
        cannot declare a scalar per frame, so a server may answer [N, 1] for the model's [N])."""
        self.settings, self.model = settings, model
        self._local = threading.local()
        self._clients: list[Any] = []
        self._lock = threading.Lock()
        client = self._client()
        where = f"Triton at {settings.url}"
        try:
            live = client.is_server_live()
        except Exception as exc:
            raise TritonError(f"{where} cannot be reached: {_reason(exc)}") from None
        if not live:
            raise TritonError(f"{where} is not live")
        try:
            ready = client.is_model_ready(model)
        except Exception as exc:
            raise TritonError(f"{where}: {_reason(exc)}") from None
        if not ready:
            raise TritonError(f"{where} has no ready model '{model}' (is it loaded, and spelt so?)")
        try:
            metadata = _metadata(client.get_model_metadata(model), settings.protocol)
            config = _config(client.get_model_config(model), settings.protocol)
        except Exception as exc:
            raise TritonError(f"{where}: the metadata of model '{model}': {_reason(exc)}") from None
        batched = int(config.get("max_batch_size", 0)) > 0
        self.inputs = tuple(_meta(item, batched) for item in metadata["inputs"])
        ranks = {meta.name: len(meta.shape) for meta in expected}
        self.outputs = tuple(_ranked(_meta(item, batched), ranks) for item in metadata["outputs"])
        """As the answers are handed on: a scalar per frame that Triton declares as [1] without that axis."""
        self.batched = batched
        """Whether Triton batches this model (max_batch_size > 0): a call may then hold several frames."""
        self.calls = 0
        self.failures = 0

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's outputs for `feed`; TritonError when Triton fails or answers what does not fit."""
        client = self._client()
        module = _module(self.settings.protocol)
        rows = next(iter(feed.values())).shape[0] if feed else 0
        inputs = []
        for name, array in feed.items():
            item = module.InferInput(name, list(array.shape), _triton_dtype(array.dtype))
            item.set_data_from_numpy(np.ascontiguousarray(array))
            inputs.append(item)
        requested = [module.InferRequestedOutput(meta.name) for meta in self.outputs]
        extra = {"client_timeout": self.settings.timeout_s} if self.settings.protocol == "grpc" else {}
        self.calls += 1
        try:
            result = client.infer(self.model, inputs, outputs=requested, **extra)
        except Exception as exc:
            self.failures += 1
            raise TritonError(f"Triton at {self.settings.url}: {_reason(exc)}") from None
        try:
            return {meta.name: self._checked(meta, result.as_numpy(meta.name), rows) for meta in self.outputs}
        except TritonError:
            self.failures += 1
            raise

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            try:
                client.close()
            except Exception as exc:  # closing a client whose server is gone
                log.debug("triton client close: %s", first_line(exc))

    def _checked(self, meta: TensorMeta, value: np.ndarray | None, rows: int) -> np.ndarray:
        where = f"Triton at {self.settings.url}, model '{self.model}'"
        if value is None:
            raise TritonError(f"{where} answered without output '{meta.name}'")
        if value.dtype != meta.dtype:
            raise TritonError(f"{where}: output '{meta.name}' expected {meta.dtype.name}, got {value.dtype.name}")
        rank = len(meta.shape)
        if value.ndim == rank + 1 and value.shape[-1] == 1:  # a scalar per frame, declared as [1]
            value = value.reshape(value.shape[:-1])
        problem = None
        if value.ndim != rank:
            problem = f"{rank} dimensions, got shape {list(value.shape)}"
        elif self.batched and value.shape[0] != rows:
            problem = f"{rows} rows (one per frame sent), got shape {list(value.shape)}"
        else:
            for axis, (want, got) in enumerate(zip(meta.shape, value.shape, strict=False)):
                if isinstance(want, int) and axis < value.ndim and want != got:
                    problem = f"size {want} on axis {axis}, got shape {list(value.shape)}"
        if problem:
            raise TritonError(f"{where}: output '{meta.name}' expected {problem}")
        return value

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            module = _module(self.settings.protocol)
            if self.settings.protocol == "grpc":
                client = module.InferenceServerClient(self.settings.address)
            else:
                timeout = self.settings.timeout_s
                client = module.InferenceServerClient(
                    self.settings.address, connection_timeout=timeout, network_timeout=timeout
                )
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client


def triton_preparer(settings: TritonSettings, cache: EngineCache, local: ModelPreparer | None = None) -> ModelPreparer:
    """The worker's `prepare_model`: a pipeline's whole model through Triton where `settings` forwards
    it, else `local`'s (every pipeline through Triton without one)."""

    def prepare(config: PipelineConfig) -> ModelSpec:
        if local is None or settings.forwards_whole(config.name):
            return triton_spec(config, settings, cache)
        return local(config)

    return prepare


def triton_spec(config: PipelineConfig, settings: TritonSettings, cache: EngineCache) -> ModelSpec:
    """The pipeline's whole model computed by Triton, checked now against the pipeline (TritonError or
    ConfigError naming the URL): the key the edge asks for (the pipeline's own model file and
    preprocessing); frames are decoded and preprocessed here on the host (Triton serves the model as
    exported, so preprocess.fold does not apply) and no local engine is built."""
    model = cache.models.load(config.model.path)
    name = settings.model_for(config.name)
    runner = TritonRunner(settings, name, model.outputs)
    try:
        triton_input = select_input(runner.inputs, config.model.input, "model.input")
        preprocess = config.preprocess.model_copy(update={"fold": False})
        Preprocessor(preprocess, triton_input)
        build_postprocessor(config.postprocess).check_outputs(runner.outputs)
    except EdgeSDKError as exc:
        where = f"Triton at {settings.url}, model '{name}'"
        raise ConfigError(f"{where} does not fit pipeline {config.name}: {first_line(exc)}") from None
    finally:
        runner.close()
    resize = config.preprocess.resize
    max_side = max(resize) if resize else None
    key = model_key(model.sha256, config.preprocess)

    def open_triton(stack: ExitStack, max_pixels: int) -> ServedModel:
        runner = TritonRunner(settings, name, model.outputs)
        stack.callback(runner.close)
        served = ServedModel(
            key,
            config.name,
            runner,
            Preprocessor(preprocess, triton_input),
            triton_input.name,
            max_side,
            shape_follows_frame=resize is None,
            max_pixels=max_pixels,
        )
        served.warm_up()
        return served

    return ModelSpec(key, config.name, None, max_side, 0, open_triton)


def _module(protocol: str) -> Any:
    try:
        if protocol == "grpc":
            # gRPC's fork support (grpcio >= 1.80) restarts its poller in every child a subprocess forks
            # once a channel is open, which can crash the child before its exec (grpc/grpc#43055); the
            # worker only forks to exec, so it needs none of it
            os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
            import tritonclient.grpc as module
        else:
            import tritonclient.http as module
    except ImportError as exc:
        raise ConfigError(
            f"forwarding to Triton needs tritonclient: pip install 'edge-sdk[triton]' ({first_line(exc)})"
        ) from None
    return module


def _metadata(response: Any, protocol: str) -> dict[str, Any]:
    if protocol == "http":
        return dict(response)
    return {
        "inputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in response.inputs],
        "outputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in response.outputs],
    }


def _config(response: Any, protocol: str) -> dict[str, Any]:
    if protocol == "http":
        return dict(response)
    return {"max_batch_size": response.config.max_batch_size}


def _meta(item: dict[str, Any], batched: bool) -> TensorMeta:
    """Triton's tensor as the SDK describes one: unknown sizes as None, the batch axis named 'batch'."""
    dtype = TRITON_DTYPES.get(str(item["datatype"]))
    if dtype is None:
        raise TritonError(f"tensor '{item['name']}' has datatype {item['datatype']}, which the SDK does not feed")
    shape: list[Dim] = [int(d) if int(d) >= 0 else None for d in item["shape"]]
    if batched and shape:
        shape[0] = "batch"
    return TensorMeta(str(item["name"]), dtype, tuple(shape))


def _ranked(meta: TensorMeta, ranks: dict[str, int]) -> TensorMeta:
    """`meta` with the rank the local model gives that output, when Triton's has one more axis of size 1
    (or unknown) at the end."""
    rank = ranks.get(meta.name)
    if rank is not None and len(meta.shape) == rank + 1 and meta.shape[-1] in (1, None):
        return TensorMeta(meta.name, meta.dtype, meta.shape[:-1])
    return meta


def _triton_dtype(dtype: np.dtype[Any]) -> str:
    for name, known in TRITON_DTYPES.items():
        if known == dtype:
            return name
    raise TritonError(f"cannot send a {dtype.name} tensor to Triton")


def _reason(exc: BaseException) -> str:
    """tritonclient's message without its stack of gRPC details."""
    message = exc.message() if hasattr(exc, "message") and callable(exc.message) else str(exc)
    return first_line(Exception(message or type(exc).__name__))
