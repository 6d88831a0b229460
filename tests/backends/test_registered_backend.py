"""A backend registered from the test tree, with no library file touched, is in the profile schema,
validates profiles, shows in `profiles list` and `doctor`, and builds and runs an engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edge_sdk.backends.registry import BACKENDS, register_backend, unregister_backend
from edge_sdk.cli.main import cli
from edge_sdk.core.errors import ConfigError
from edge_sdk.core.host import HostFacts
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.profiles import ProfileCatalog
from edge_sdk.schemas import schema_json
from tools.harness.onnx_models import float_classifier

from .reference_backend import NAME, PROFILE_YAML, REFERENCE_BACKEND

HOST = HostFacts(arch="x86_64", cpu_model="Test CPU", cpu_flags=frozenset({"avx2"}))


@pytest.fixture
def registered() -> Iterator[None]:
    register_backend(REFERENCE_BACKEND)
    yield
    unregister_backend(NAME)


@pytest.fixture
def profile_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "reference-box.yaml").write_text(PROFILE_YAML)
    return folder


def test_unregistered_the_profile_is_refused_at_its_backend_line(profile_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"reference-box.yaml:7: .*unknown backend 'onnx-reference'"):
        ProfileCatalog(profile_dir).load("reference-box")


@pytest.mark.usefixtures("registered")
def test_registered_its_options_are_in_the_profile_schema() -> None:
    schema = json.loads(schema_json("profile"))
    members = schema["properties"]["engine"]["oneOf"]
    backends = [member["properties"]["backend"]["const"] for member in members]
    assert backends == ["onnxruntime", "tensorrt", NAME]
    reference = members[2]
    assert reference["properties"]["optimized"]["type"] == "boolean"
    assert reference["additionalProperties"] is False


@pytest.mark.usefixtures("registered")
def test_registered_a_profile_validates_its_options_with_the_backends_model(profile_dir: Path) -> None:
    profile = ProfileCatalog(profile_dir).load("reference-box")
    assert profile.backend() is REFERENCE_BACKEND and profile.engine.optimized is False  # type: ignore[attr-defined]
    (profile_dir / "reference-box.yaml").write_text(PROFILE_YAML.replace("optimized: false", "optimised: true"))
    with pytest.raises(ConfigError, match=r"reference-box.yaml:8: .*optimised"):
        ProfileCatalog(profile_dir).load("reference-box")
    text = PROFILE_YAML.replace("precisions: [fp32]", "precisions: [fp32, int8]")
    (profile_dir / "reference-box.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"backend onnx-reference does not build them"):
        ProfileCatalog(profile_dir).load("reference-box")


@pytest.mark.usefixtures("registered")
def test_registered_profiles_list_and_doctor_show_it(profile_dir: Path) -> None:
    runner = CliRunner(env={"COLUMNS": "200"})
    listed = runner.invoke(cli, ["--profile-dir", str(profile_dir), "profiles", "list"])
    assert listed.exit_code == 0, listed.output
    assert "reference-box" in listed.output and "onnx.reference" in listed.output
    doctor = runner.invoke(cli, ["--profile-dir", str(profile_dir), "doctor", "--json"])
    assert doctor.exit_code == 0, doctor.output
    report = json.loads(doctor.output)
    assert report["backends"][NAME] == {"evaluator": "usable"}
    assert "onnx-reference backend" in [package["purpose"] for package in report["packages"]]
    status = {profile["name"]: profile for profile in report["profiles"]}["reference-box"]
    assert status["usable"] and status["note"] == "pure Python: for checking, not for speed"


@pytest.mark.usefixtures("registered")
def test_registered_it_builds_caches_and_runs_an_engine_that_matches_onnxruntime(
    profile_dir: Path, tmp_path: Path, catalog: ProfileCatalog
) -> None:
    model = float_classifier(tmp_path / "classifier.onnx")
    cache = EngineCache(tmp_path / "cache")
    profile = ProfileCatalog(profile_dir).load("reference-box")
    prepared = prepare_engine(model, profile, cache=cache, facts=HOST)
    assert prepared.built and prepared.entry.manifest["facts"]["evaluator"] == "onnx.reference"
    assert prepared.entry.key["backend"] == NAME
    images = np.random.default_rng(1).random((2, 3, 8, 8), dtype=np.float32)
    with prepared.open() as runner:
        got = runner.infer({"images": images})["logits"]
    with prepare_engine(model, catalog.load("x86-cpu"), cache=cache, facts=HOST).open() as onnxruntime:
        want = onnxruntime.infer({"images": images})["logits"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not prepare_engine(model, profile, cache=cache, facts=HOST).built, "the second prepare is a cache hit"
    with pytest.raises(ConfigError, match="fp32 only"):
        prepare_engine(model, profile.model_copy(update={"precisions": ["fp32", "fp16"]}), "fp16", cache=cache)


def test_register_refuses_a_taken_name_and_options_named_for_another_backend() -> None:
    import dataclasses

    with pytest.raises(ConfigError, match="already registered"):
        register_backend(BACKENDS["onnxruntime"])
    with pytest.raises(ConfigError, match="Literal"):
        register_backend(dataclasses.replace(REFERENCE_BACKEND, name="other"))
