"""A profile's `batch:` sets the batch axis of the engines built for it, unless the build asks itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from edge_sdk.core.host import HostFacts
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.graph.options import GraphOptions
from edge_sdk.profiles import DeviceProfile


def test_prepare_engine_when_profile_asks_dynamic_batch_runs_a_batch_one_model_on_three_frames(
    tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache, host_facts: HostFacts
) -> None:
    # Given a model exported with batch 1 and a profile that asks for a dynamic batch axis
    profile = cpu_profile.model_copy(update={"batch": "dynamic"})

    # When its engine is prepared and fed three images at once
    prepared = prepare_engine(tiny_models["float_classifier_batch1"], profile, cache=engine_cache, facts=host_facts)
    images = np.random.default_rng(0).random((3, 3, 8, 8), dtype=np.float32)
    with prepared.open() as runner:
        logits = runner.infer({"images": images})["logits"]

    # Then the engine takes the batch and the key records the graph that made it
    assert not isinstance(prepared.inputs[0].shape[0], int), "the engine input's batch axis must be dynamic"
    assert logits.shape[0] == 3, "a dynamic batch axis must take three images at once"
    assert prepared.entry.key["graph_sha256"] == GraphOptions(batch=None).fingerprint(), (
        "the profile's batch must be part of the engine's key"
    )


def test_prepare_engine_when_profile_fixes_the_batch_and_the_build_asks_another_uses_the_builds(
    tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache, host_facts: HostFacts
) -> None:
    # Given a profile with a fixed batch of 2, and a build that asks for batch 1 itself
    profile = cpu_profile.model_copy(update={"batch": 2})

    # When engines are prepared with and without the build's own request
    from_profile = prepare_engine(tiny_models["float_classifier"], profile, cache=engine_cache, facts=host_facts)
    own = prepare_engine(
        tiny_models["float_classifier"], profile, cache=engine_cache, facts=host_facts, graph=GraphOptions(batch=1)
    )

    # Then the profile's batch applies only where the build did not ask
    assert from_profile.inputs[0].shape[0] == 2, "the profile's fixed batch must reach the engine input"
    assert own.inputs[0].shape[0] == 1, "a batch the build asks for wins over the profile's"


def test_device_profile_when_batch_is_zero_refuses_it(cpu_profile: DeviceProfile) -> None:
    # Given a profile document with batch 0
    document = cpu_profile.model_dump() | {"batch": 0}

    # When it is validated, then it is refused with the expected values named
    with pytest.raises(ValidationError, match=r"batch size 1\.\.1024"):
        DeviceProfile.model_validate(document)
