"""deploy/images/: each Containerfile, read with dockerfile-parse, builds on its family's base, installs the SDK
from this tree with the family's extra, runs `edge-sdk agent` on the shared config path as a non-root user and
declares the config and state folders as volumes. (Building them needs a registry and a builder that can run
here: docs/provision.md says what was built.)"""

from __future__ import annotations

import re
import shlex

import pytest

from ..conftest import REPO_ROOT

dockerfile_parse = pytest.importorskip("dockerfile_parse", reason="dockerfile-parse (the test extra) not installed")

IMAGES = REPO_ROOT / "deploy" / "images"
FAMILIES = {
    "Containerfile.x86-cpu": ("docker.io/library/debian:bookworm-slim", "cpu"),
    "Containerfile.arm64": ("docker.io/library/debian:bookworm-slim", "cpu"),
    "Containerfile.jetson": ("nvcr.io/nvidia/l4t-jetpack:r36", "tensorrt"),
}


def parsed(name: str) -> list[dict[str, str]]:
    with (IMAGES / name).open("rb") as file:
        return list(dockerfile_parse.DockerfileParser(fileobj=file).structure)


def values(instructions: list[dict[str, str]], kind: str) -> list[str]:
    return [item["value"] for item in instructions if item["instruction"] == kind]


def test_every_family_has_a_containerfile() -> None:
    assert sorted(path.name for path in IMAGES.glob("Containerfile.*")) == sorted(FAMILIES)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_containerfile_installs_the_sdk_and_runs_the_agent_as_its_user(name: str) -> None:
    base, extra = FAMILIES[name]
    instructions = parsed(name)
    (source,) = values(instructions, "FROM")
    assert source.split()[-1].startswith(base), source
    if name.endswith("arm64"):
        assert "--platform=linux/arm64" in source

    runs = " ".join(values(instructions, "RUN"))
    assert re.search(rf"pip install [^&]*'\.\[{extra}\]'", runs), f"{name} installs the SDK with [{extra}]"
    for copied in values(instructions, "COPY"):
        for path in shlex.split(copied)[:-1]:
            assert (REPO_ROOT / path).exists(), f"{name} copies {path}, which the repository lacks"

    (user,) = values(instructions, "USER")
    assert user not in {"root", "0"} and user.split(":")[0] == "edge-sdk"
    assert re.search(r"useradd --system [^&]*edge-sdk", runs), f"{name} creates the edge-sdk user"

    volumes = " ".join(values(instructions, "VOLUME"))
    assert '"/etc/edge-sdk"' in volumes and '"/var/lib/edge-sdk"' in volumes

    (entrypoint,) = values(instructions, "ENTRYPOINT")
    assert entrypoint == '["edge-sdk", "agent", "--config", "/etc/edge-sdk/agent.yaml"]'
    assert "EDGE_SDK_CACHE_DIR=/var/lib/edge-sdk/engines" in values(instructions, "ENV")
