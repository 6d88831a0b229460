"""Shipped profiles load; broken profiles fail with one ConfigError line naming the file, the line and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_sdk.core.errors import ConfigError
from edge_sdk.profiles import ProfileCatalog

SHIPPED_PROFILES = Path(__file__).resolve().parents[2] / "device_profiles"
SHIPPED_NAMES = sorted(path.stem for path in SHIPPED_PROFILES.glob("*.yaml"))

# A valid profile; every bad case below changes exactly one numbered line of it.
VALID_LINES = [
    "# yaml-language-server: $schema=profile.schema.json",  # 1
    "name: test-box",  # 2
    "description: Test box for error messages",  # 3
    "priority: 10",  # 4
    "detect:",  # 5
    "  arch: [aarch64]",  # 6
    "precisions: [fp32, fp16]",  # 7
    "default_precision: fp16",  # 8
    "engine:",  # 9
    "  backend: onnxruntime",  # 10
    "  execution_providers:",  # 11
    "    - type: tensorrt",  # 12
    "      device_id: 0",  # 13
    "      workspace_mb: 512",  # 14
    "    - type: cpu",  # 15
]


def with_line(number: int, text: str | None) -> str:
    """The valid profile with line `number` (1-based) replaced by `text`, or removed when `text` is None."""
    lines = list(VALID_LINES)
    if text is None:
        del lines[number - 1]
    else:
        lines[number - 1] = text
    return "\n".join(lines) + "\n"


def write_profile(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def load_error(directory: Path, name: str) -> str:
    with pytest.raises(ConfigError) as raised:
        ProfileCatalog(directory).load(name)
    return str(raised.value)


def test_catalog_when_reading_shipped_profiles_finds_them() -> None:
    # Given the shipped profile directory
    # When the catalog lists it
    names = ProfileCatalog(SHIPPED_PROFILES).names()

    # Then every kind of box the detection tests rely on has a profile
    expected = {"arm-cpu", "atlas-npu", "jetson-orin-dla", "jetson-orin-gpu", "x86-cpu", "x86-nvidia"}
    assert expected <= set(names), f"shipped profiles should include {sorted(expected)}, found {names}"


@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_load_when_profile_is_shipped_validates_and_is_named_after_its_file(name: str) -> None:
    # Given a shipped profile file
    # When the catalog loads it
    profile = ProfileCatalog(SHIPPED_PROFILES).load(name)

    # Then it validates, its name is its file name and its default precision is one it builds
    assert profile.name == name, f"profile in {name}.yaml should be named '{name}'"
    assert profile.default_precision in profile.precisions, f"{name}: default_precision should be in precisions"


def test_load_when_profile_is_valid_returns_it(tmp_path: Path) -> None:
    # Given the unmodified base profile the bad cases below are derived from
    write_profile(tmp_path, "test-box", "\n".join(VALID_LINES) + "\n")

    # When it is loaded
    profile = ProfileCatalog(tmp_path).load("test-box")

    # Then it is valid, so each bad case fails only because of its one changed line
    assert profile.name == "test-box", "the base profile of the error cases should itself be valid"


@pytest.mark.parametrize(
    ("line", "text", "key", "fragment"),
    [
        pytest.param(13, "      bogus: 0", "engine.execution_providers.0.bogus", "unknown key", id="unknown-key"),
        pytest.param(4, 'priority: "high"', "priority", "'high'", id="wrong-type"),
        pytest.param(
            14,
            "      workspace_mb: lots",
            "engine.execution_providers.0.workspace_mb",
            "'lots'",
            id="wrong-type-in-list-item",
        ),
        pytest.param(6, "  arch: [armv7l]", "detect.arch.0", "'armv7l'", id="unknown-arch"),
        pytest.param(
            10,
            "  backend: tensorrtx",
            "engine.backend",
            "tensorrtx",
            id="unknown-backend",
        ),
        pytest.param(
            8,
            "default_precision: int8",
            "default_precision",
            "int8",
            id="default-precision-not-in-precisions",
        ),
    ],
)
def test_load_when_profile_is_invalid_names_file_line_and_key(
    tmp_path: Path, line: int, text: str, key: str, fragment: str
) -> None:
    # Given a profile that is valid except for one line
    path = write_profile(tmp_path, "test-box", with_line(line, text))

    # When the catalog loads it
    message = load_error(tmp_path, "test-box")

    # Then the single-line error points at the file, the exact line and the key, and shows what was wrong
    assert f"{path}:{line}:" in message, f"error should name {path.name} at line {line}: {message}"
    assert f"key '{key}'" in message, f"error should name key '{key}': {message}"
    assert fragment in message, f"error should show the offending value or problem ({fragment}): {message}"
    assert "\n" not in message, f"error should be one line: {message!r}"


def test_load_when_provider_type_is_unknown_names_the_list_item_and_lists_known_types(tmp_path: Path) -> None:
    # Given a profile whose second execution provider has an unknown type
    path = write_profile(tmp_path, "test-box", with_line(15, "    - type: ascend"))

    # When the catalog loads it
    message = load_error(tmp_path, "test-box")

    # Then the error names the file, the line, the provider item and the types that exist
    assert f"{path}:15:" in message, f"error should name {path.name} at line 15: {message}"
    # The key may name the item or its 'type' field; both identify the entry on line 15.
    assert "key 'engine.execution_providers.1" in message, f"error should name the second provider: {message}"
    assert "ascend" in message, f"error should show the unknown type: {message}"
    for known in ("cpu", "cuda", "tensorrt", "cann"):
        assert f"'{known}'" in message, f"error should list known provider type '{known}': {message}"


def test_load_when_required_key_is_missing_names_the_key(tmp_path: Path) -> None:
    # Given a profile without its description line
    path = write_profile(tmp_path, "test-box", with_line(3, None))

    # When the catalog loads it
    message = load_error(tmp_path, "test-box")

    # Then the error names the file and the missing key
    assert message.startswith(f"{path}:"), f"error should start with the file name: {message}"
    assert "key 'description': required key is missing" in message, f"error should name the missing key: {message}"


@pytest.mark.parametrize(
    ("line", "text", "problem"),
    [
        pytest.param(4, "priority: 10: 20", "mapping values are not allowed here", id="value-with-colon"),
        pytest.param(14, "     workspace_mb: 512", "expected <block end>", id="bad-indentation"),
        pytest.param(
            7,
            "precisions: [fp32, fp16",
            "expected ',' or ']'",
            id="unclosed-bracket",
        ),
    ],
)
def test_load_when_yaml_is_malformed_names_file_and_line(tmp_path: Path, line: int, text: str, problem: str) -> None:
    # Given a profile with a YAML syntax error on one line
    path = write_profile(tmp_path, "test-box", with_line(line, text))

    # When the catalog loads it
    message = load_error(tmp_path, "test-box")

    # Then the error names the file and the line the mistake is on, and says it is a YAML problem
    assert f"{path}:{line}: malformed YAML" in message, f"error should point at {path.name} line {line}: {message}"
    assert problem in message, f"error should keep the parser's explanation ({problem}): {message}"


def test_load_when_name_differs_from_file_name_names_file_and_key(tmp_path: Path) -> None:
    # Given a valid profile saved under another file name
    path = write_profile(tmp_path, "other-box", with_line(2, "name: test-box"))

    # When it is loaded by its file name
    message = load_error(tmp_path, "other-box")

    # Then the error names the file, the 'name' key and both names
    assert message.startswith(str(path)), f"error should start with the file name: {message}"
    assert "key 'name'" in message, f"error should name key 'name': {message}"
    assert "'other-box'" in message, f"error should show the expected name: {message}"
    assert "'test-box'" in message, f"error should show the name found in the file: {message}"


def test_load_when_profile_name_is_unknown_lists_known_names() -> None:
    # Given the shipped catalog
    catalog = ProfileCatalog(SHIPPED_PROFILES)

    # When a profile that does not exist is asked for
    with pytest.raises(ConfigError) as raised:
        catalog.load("jetson-nano-dla")
    message = str(raised.value)

    # Then the error names the unknown profile and every profile that does exist
    assert "'jetson-nano-dla'" in message, f"error should name the unknown profile: {message}"
    missing = [name for name in SHIPPED_NAMES if name not in message]
    assert not missing, f"error should list every known profile, missing {missing}: {message}"


def test_load_when_directory_has_no_profiles_says_none_are_known(tmp_path: Path) -> None:
    # Given an empty profile directory
    catalog = ProfileCatalog(tmp_path)

    # When a profile is asked for
    with pytest.raises(ConfigError) as raised:
        catalog.load("x86-cpu")

    # Then the error says there are no known profiles rather than listing nothing
    assert "known profiles: none" in str(raised.value), f"error should say none are known: {raised.value}"


@pytest.mark.parametrize(
    "name",
    ["../pipelines/demo", "../outside", "/etc/hostname", "sub/test-box", "..", ".hidden", "a\\b", "x\0y", ""],
)
def test_load_when_name_is_not_a_plain_file_stem_then_refused_before_any_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # Given a profile folder with a valid profile in a sub-folder and one beside the folder
    folder = tmp_path / "profiles"
    (folder / "sub").mkdir(parents=True)
    write_profile(folder / "sub", "test-box", with_line(1, None))
    write_profile(tmp_path, "outside", with_line(1, None))
    monkeypatch.setattr("edge_sdk.profiles.catalog.load_yaml_model", _no_read)

    # When a name that is not a plain file stem is asked for
    message = load_error(folder, name)

    # Then one ConfigError line says what a name is and what came, and no file was read
    assert "\n" not in message, f"the error should be one line: {message!r}"
    assert message.startswith("expected a profile name"), message
    assert repr(name) in message, f"the error should show the name given: {message}"


def _no_read(path: Path, *args: object, **kwargs: object) -> None:
    raise AssertionError(f"{path} was read")
