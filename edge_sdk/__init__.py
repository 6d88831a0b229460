"""edge_sdk: deploy vision models onto edge boxes.

The public Python API (everything else is reached through these, or is internal):

- device profiles: `detect_profile()`, `load_profile(name)`, `ProfileCatalog`, `DeviceProfile`;
- engines: `prepare_engine(model, profile, precision)` -> `PreparedEngine`, whose `open()` is a runner
  with `infer({input: array})`; `EngineCache`;
- pipelines: `load_pipeline(path)` or `PipelineConfig.model_validate({...})` built in code, then
  `run_pipeline(config, profile)` -> `RunSummary`, or `for result in iter_results(config, profile)`;
  results are `Result` (frame metadata, `Detection`s, `Classification`s);
- the fleet operator: `FleetOperator` over an `MqttClient` connected with `MqttSettings`
  (`load_broker_file(path)` reads them from a YAML file);
- errors: every SDK error is an `EdgeSDKError` (`ConfigError`, `ModelError`, ...).

Names are imported on first use, so `import edge_sdk` stays light (no onnxruntime, no paho).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_sdk.core.lazy_exports import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "detect_profile": "edge_sdk.profiles.catalog",
    "load_profile": "edge_sdk.profiles.catalog",
    "ProfileCatalog": "edge_sdk.profiles.catalog",
    "DeviceProfile": "edge_sdk.profiles.model",
    "prepare_engine": "edge_sdk.engines.engine",
    "PreparedEngine": "edge_sdk.engines.engine",
    "EngineCache": "edge_sdk.engines.cache",
    "PipelineConfig": "edge_sdk.pipeline.config",
    "load_pipeline": "edge_sdk.pipeline.config",
    "run_pipeline": "edge_sdk.pipeline.run",
    "iter_results": "edge_sdk.pipeline.run",
    "RunSummary": "edge_sdk.pipeline.metrics",
    "Result": "edge_sdk.core.results",
    "Detection": "edge_sdk.core.results",
    "Classification": "edge_sdk.core.results",
    "FrameMeta": "edge_sdk.core.results",
    "FleetOperator": "edge_sdk.fleet.operator.client",
    "MqttClient": "edge_sdk.mqtt.client",
    "MqttSettings": "edge_sdk.mqtt.settings",
    "load_broker_file": "edge_sdk.fleet.wire.broker_file",
    "EdgeSDKError": "edge_sdk.core.errors",
    "ConfigError": "edge_sdk.core.errors",
    "ModelError": "edge_sdk.core.errors",
}

__all__ = [
    "Classification",
    "ConfigError",
    "Detection",
    "DeviceProfile",
    "EdgeSDKError",
    "EngineCache",
    "FleetOperator",
    "FrameMeta",
    "ModelError",
    "MqttClient",
    "MqttSettings",
    "PipelineConfig",
    "PreparedEngine",
    "ProfileCatalog",
    "Result",
    "RunSummary",
    "__version__",
    "detect_profile",
    "iter_results",
    "load_broker_file",
    "load_pipeline",
    "load_profile",
    "prepare_engine",
    "run_pipeline",
]

if TYPE_CHECKING:
    from edge_sdk.core.errors import ConfigError, EdgeSDKError, ModelError
    from edge_sdk.core.results import Classification, Detection, FrameMeta, Result
    from edge_sdk.engines.cache import EngineCache
    from edge_sdk.engines.engine import PreparedEngine, prepare_engine
    from edge_sdk.fleet.operator.client import FleetOperator
    from edge_sdk.fleet.wire.broker_file import load_broker_file
    from edge_sdk.mqtt.client import MqttClient
    from edge_sdk.mqtt.settings import MqttSettings
    from edge_sdk.pipeline.config import PipelineConfig, load_pipeline
    from edge_sdk.pipeline.metrics import RunSummary
    from edge_sdk.pipeline.run import iter_results, run_pipeline
    from edge_sdk.profiles.catalog import ProfileCatalog, detect_profile, load_profile
    from edge_sdk.profiles.model import DeviceProfile

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
