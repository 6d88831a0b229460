"""The one YAML loader: files that try to exhaust it are refused in one line naming the file and the line."""

from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from edge_sdk.core import yaml_model
from edge_sdk.core.errors import ConfigError
from edge_sdk.core.yaml_model import MAX_YAML_BYTES, parse_yaml, read_yaml_text
from edge_sdk.pipeline.config import load_pipeline

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast

EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))
# The CLI maps about 200 MiB at start; an alias bomb expanded by the old loader passed 2.8 GB.
ADDRESS_SPACE_LIMIT = 1024 * 1024 * 1024

# Ten values, then nine levels of ten aliases each: 10**10 values once expanded.
# Line 6 holds 'lol4', whose '*a3' (11111 values each) take the document past the cap of 100000.
BILLION_LAUGHS = "name: bomb\nlol0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"lol{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]\n" for level in range(1, 10)
)
BOMB_LINE = 6

# A pipeline that uses an anchor, an alias and a merge key the way people do.
PIPELINE_WITH_ALIASES = """\
name: front-door
model:
  path: models/detector.onnx
sources:
  - &door {uri: clips/door.mp4, max_frames: 10}
  - <<: *door
    uri: clips/yard.mp4
postprocess:
  type: ssd
  labels: &labels [person, car]
sinks:
  - type: stdout
"""


def limit_address_space() -> None:
    """Run in the child: a regression fails with MemoryError instead of exhausting the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))


def edge_sdk(*args: object, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run the installed `edge-sdk` with a bounded address space, profiles and cache inside `tmp_path`."""
    env = {
        **os.environ,
        "EDGE_SDK_CACHE_DIR": str(tmp_path / "engines"),
        "EDGE_SDK_PROFILE_DIR": str(tmp_path / "profiles"),
        "COLUMNS": "200",
    }
    env.pop("EDGE_SDK_FLEET_BROKER", None)
    return subprocess.run(
        [EDGE_SDK, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        preexec_fn=limit_address_space,
    )


def assert_one_line_error(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert done.returncode != 0, f"a refused file must exit non-zero; stdout: {done.stdout!r}"
    assert "Traceback" not in done.stderr, f"no traceback without --debug: {done.stderr!r}"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), f"expected one 'error:' line, got {done.stderr!r}"
    for fragment in fragments:
        assert fragment in lines[0], f"the error should mention {fragment!r}: {lines[0]!r}"


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def parse_error(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_yaml(text, source="doc.yaml")
    return str(caught.value)


# Each kind of YAML file the SDK reads, by the command a user runs on it: (file, arguments).
KINDS = {
    "pipeline": ("pipeline.yaml", ["run", "{file}", "--profile", "x86-cpu"]),
    "profile": ("profiles/bomb.yaml", ["profiles", "show", "bomb"]),
    "agent-config": ("agent.yaml", ["agent", "--config", "{file}"]),
    "deployment-manifest": ("manifest.yaml", ["fleet", "sign", "{file}", "--key", "none.key", "--out", "out.json"]),
    "operator-broker": ("operator.yaml", ["fleet", "ls", "--broker", "{file}"]),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", list(KINDS))
def test_cli_when_a_yaml_file_is_a_billion_laughs_refuses_it_at_the_alias_line(tmp_path: Path, kind: str) -> None:
    # given a billion-laughs file where the command expects its YAML
    name, args = KINDS[kind]
    path = write(tmp_path / name, BILLION_LAUGHS)
    # when the command runs with a 1 GiB address space
    done = edge_sdk(*[str(path) if a == "{file}" else a for a in args], tmp_path=tmp_path)
    # then it is refused in one line at the line where the aliases pass the cap, not by running out of memory
    assert_one_line_error(done, f"{path}:{BOMB_LINE}:", "aliases expanded")


@pytest.mark.timeout(120)
def test_cli_when_a_pipeline_is_random_binary_bytes_refuses_it_in_one_line(tmp_path: Path) -> None:
    path = write(tmp_path / "pipeline.yaml", random.Random(9).randbytes(4096))
    done = edge_sdk("run", path, "--profile", "x86-cpu", tmp_path=tmp_path)
    assert_one_line_error(done, f"{path}:", "expected UTF-8 text")


def test_load_pipeline_when_a_file_is_random_binary_bytes_names_the_file_and_line(tmp_path: Path) -> None:
    raw = b"name: t\nsources:\n" + random.Random(5).randbytes(1024)
    path = write(tmp_path / "pipeline.yaml", raw)
    with pytest.raises(ConfigError) as caught:
        load_pipeline(path)
    bad = next(i for i in range(len(raw)) if not _is_utf8_prefix(raw[: i + 1]))
    line = raw.count(b"\n", 0, bad) + 1
    assert str(caught.value).startswith(f"{path}:{line}: expected UTF-8 text, got byte "), str(caught.value)


def _is_utf8_prefix(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.reason == "unexpected end of data"
    return True


def test_load_pipeline_when_the_text_holds_control_characters_says_it_is_not_yaml_text(tmp_path: Path) -> None:
    path = write(tmp_path / "pipeline.yaml", "name: t\nmodel: \x00\x01\x02\n")
    with pytest.raises(ConfigError, match=rf"^{path}:2: expected YAML text, got the control character #x0000"):
        load_pipeline(path)


def test_load_pipeline_when_a_number_has_5000_digits_refuses_it_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path / "pipeline.yaml", PIPELINE_WITH_ALIASES + "runtime:\n  ring_slots: " + "9" * 5000 + "\n")
    with pytest.raises(ConfigError) as caught:
        load_pipeline(path)
    assert str(caught.value) == f"{path}:14: expected a number of at most 100 characters, got 5000"


def test_load_pipeline_when_the_file_is_over_the_size_cap_names_the_file_and_its_size(tmp_path: Path) -> None:
    path = write(tmp_path / "pipeline.yaml", "name: t\n# " + "x" * MAX_YAML_BYTES + "\n")
    with pytest.raises(ConfigError) as caught:
        load_pipeline(path)
    size = path.stat().st_size
    assert (
        str(caught.value)
        == f"{path}: file too large: expected at most {MAX_YAML_BYTES} bytes (1 MiB), got {size} bytes"
    )


def test_read_yaml_text_when_the_file_never_ends_stops_at_the_size_cap() -> None:
    with pytest.raises(ConfigError, match=rf"^/dev/zero: file too large: .* got more than {MAX_YAML_BYTES} bytes$"):
        read_yaml_text(Path("/dev/zero"))


def test_load_pipeline_when_anchors_and_aliases_are_used_a_few_times_loads_them(tmp_path: Path) -> None:
    config = load_pipeline(write(tmp_path / "pipeline.yaml", PIPELINE_WITH_ALIASES))
    assert [s.max_frames for s in config.sources] == [10, 10], "the merge key should copy the anchored source"
    assert [Path(s.uri).name for s in config.sources] == ["door.mp4", "yard.mp4"], "the later key wins over the merge"


def test_load_pipeline_when_a_key_inside_an_alias_is_wrong_still_names_a_line(tmp_path: Path) -> None:
    text = PIPELINE_WITH_ALIASES.replace("max_frames: 10", "max_frames: ten")
    path = write(tmp_path / "pipeline.yaml", text)
    with pytest.raises(ConfigError, match=rf"^{path}:5: key 'sources.0.max_frames'"):
        load_pipeline(path)


def test_parse_yaml_when_anchors_are_reused_builds_each_value_once() -> None:
    data, _ = parse_yaml("base: &b {x: 1}\nboth: [*b, *b]\nmerged: {<<: *b, y: 2}\n")
    assert data == {"base": {"x": 1}, "both": [{"x": 1}, {"x": 1}], "merged": {"x": 1, "y": 2}}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: &a [1, *a]\n", "doc.yaml:1: alias '*a' refers to a node that contains it"),
        ("[" * 100 + "]" * 100, "doc.yaml:1: expected collections nested at most 64 deep, got 65"),
        ("d: 2024-13-45\n", "doc.yaml:1: cannot read value '2024-13-45': month must be in 1..12"),
        ("n: 1." + "5" * 200 + "\n", "doc.yaml:1: expected a number of at most 100 characters, got 202"),
        ("a: &x 1\nb: &x 2\n", "doc.yaml:2: malformed YAML: found duplicate anchor 'x' (first on line 1)"),
        (
            "runtime:\n  ring_slots: 8\n  ring_slots: 16\n",
            "doc.yaml:3: key 'ring_slots' appears twice (first on line 2)",
        ),
    ],
    ids=["recursive-alias", "deep-nesting", "impossible-date", "long-float", "duplicate-anchor", "duplicate-key"],
)
def test_parse_yaml_when_a_document_is_hostile_refuses_it_in_one_line(text: str, expected: str) -> None:
    assert parse_error(text) == expected


def test_parse_yaml_when_aliases_nest_past_the_depth_cap_names_the_alias() -> None:
    text = "a: &a " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n"
    assert parse_error(text).startswith("doc.yaml:2: expected collections nested at most 64 deep, got 71 (alias '*a'")


def test_parse_yaml_when_a_document_has_more_values_than_the_cap_refuses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yaml_model, "MAX_YAML_NODES", 50)
    assert parse_yaml("[" + ", ".join(["1"] * 48) + "]")[0] == [1] * 48, "49 values are within a cap of 50"
    assert parse_error("a: 1\nb: [" + ", ".join(["1"] * 60) + "]\n").startswith(
        "doc.yaml:2: expected at most 50 values"
    )
