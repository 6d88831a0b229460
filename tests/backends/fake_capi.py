"""A fake onnxruntime `capi/` folder of real shared libraries, so the provider probe meets real dlopen errors."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

from edge_sdk.backends.onnxruntime.providers import PROVIDER_LIBRARIES, SHARED_LIBRARY

MISSING_DEPENDENCY = "libdep.so"


def compile_library(source: str, out: Path, *link: str) -> Path:
    """`source` (C) compiled into the shared library `out`, linked with `link` (e.g. -L DIR -ldep)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is needed to build the fake provider libraries")
    c_file = out.with_suffix(".c")
    c_file.write_text(source)
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(out), str(c_file), *link], check=True, capture_output=True)
    return out


def build_fake_capi(folder: Path, loadable: Iterable[str] = (), unloadable: Iterable[str] = ()) -> Path:
    """A capi folder whose `unloadable` providers link against libdep.so, which is then deleted."""
    folder.mkdir(parents=True, exist_ok=True)
    deps = folder / "deps"
    deps.mkdir()
    compile_library("int dep(void) { return 0; }\n", deps / MISSING_DEPENDENCY)
    compile_library("int shared(void) { return 0; }\n", folder / SHARED_LIBRARY)
    for name in loadable:
        compile_library("int provider(void) { return 0; }\n", folder / PROVIDER_LIBRARIES[name])
    for name in unloadable:
        source = "int dep(void);\nint provider(void) { return dep(); }\n"
        compile_library(source, folder / PROVIDER_LIBRARIES[name], f"-L{deps}", "-ldep")
    shutil.rmtree(deps)
    return folder
