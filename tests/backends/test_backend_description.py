"""The runtime's worker layout, the fold's resize, `profiles list` and `doctor` ask a profile's backend,
not ONNX Runtime's provider list: a backend that says otherwise is believed."""

from __future__ import annotations

import dataclasses
import os

import pytest

from edge_sdk import doctor
from edge_sdk.backends.registry import BACKENDS
from edge_sdk.core.host import HostProbe
from edge_sdk.engines.engine import exact_uint8_resize
from edge_sdk.pipeline.config import RuntimeSpec
from edge_sdk.pipeline.worker_layout import inference_layout
from edge_sdk.profiles import ProfileCatalog


def test_a_cpu_profile_runs_several_single_threaded_workers_and_folds_an_exact_resize(catalog: ProfileCatalog) -> None:
    profile = catalog.load("x86-cpu")
    workers, threads = inference_layout(RuntimeSpec(), profile)
    assert workers == min(os.cpu_count() or 1, 4) and threads == (1 if workers > 1 else None)
    assert exact_uint8_resize(profile) is True
    assert BACKENDS["onnxruntime"].devices(profile.engine) == "cpu"


def test_what_the_backend_says_decides_the_layout_the_fold_and_the_doctor_note(
    catalog: ProfileCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a backend that says the same options run on an accelerator and skip something here
    said = dataclasses.replace(
        BACKENDS["onnxruntime"],
        runs_on_cpu=lambda options: False,
        exact_uint8_resize=lambda options: False,
        host_notes=lambda options: ["skips the moon (not installed)"],
    )
    monkeypatch.setitem(BACKENDS, "onnxruntime", said)
    profile = catalog.load("x86-cpu")
    # then the runtime runs one worker with the profile's threads, the fold keeps the resize in float,
    assert inference_layout(RuntimeSpec(), profile) == (1, None)
    assert exact_uint8_resize(profile) is False
    # and doctor shows the backend's note for the usable profile
    status = doctor._profile_status(catalog, "x86-cpu", HostProbe().facts())
    assert status.usable and status.note == "skips the moon (not installed)"
