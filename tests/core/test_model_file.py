"""A model path that is not a regular file, or is too large, is refused before a byte is read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edge_sdk.core.errors import ModelError
from edge_sdk.core.model_file import MAX_MODEL_BYTES, ModelFile, read_model_bytes


def load_error(path: Path) -> str:
    with pytest.raises(ModelError) as raised:
        ModelFile.load(path)
    message = str(raised.value)
    assert "\n" not in message, f"one line: {message!r}"
    return message


def test_model_file_when_path_is_dev_zero_is_refused_without_reading() -> None:
    # /dev/zero never ends: reading it would fill memory until the OOM killer stepped in
    message = load_error(Path("/dev/zero"))
    assert message == "expected a regular model file, got a character device: /dev/zero", message


def test_model_file_when_path_is_a_folder_is_refused(tmp_path: Path) -> None:
    message = load_error(tmp_path)
    assert message == f"expected a regular model file, got a folder: {tmp_path}", message


def test_model_file_when_path_is_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    # given a named pipe nobody writes to: a plain open() would block forever
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    # when / then
    assert "a FIFO (named pipe)" in load_error(fifo)


def test_model_file_when_larger_than_the_cap_is_refused_naming_both_sizes(tmp_path: Path) -> None:
    # given a sparse 3 GiB file (no disk used): larger than one ONNX protobuf can be
    big = tmp_path / "huge.onnx"
    with big.open("wb") as file:
        file.truncate(3 * 1024**3)
    # when
    message = load_error(big)
    # then
    assert "is 3.0 GiB; expected at most 2.0 GiB" in message, message
    assert MAX_MODEL_BYTES == 2 * 1024**3, "the cap is protobuf's own limit for one file"


def test_read_model_bytes_when_under_the_cap_returns_every_byte(tmp_path: Path) -> None:
    path = tmp_path / "small.onnx"
    path.write_bytes(b"x" * 100)
    assert read_model_bytes(path) == b"x" * 100
    with pytest.raises(ModelError, match="expected at most"):
        read_model_bytes(path, max_bytes=99)


def test_model_file_when_missing_says_not_found(tmp_path: Path) -> None:
    assert load_error(tmp_path / "nope.onnx") == f"model file not found: {tmp_path / 'nope.onnx'}"


def test_model_file_when_a_symlink_points_at_a_device_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "model.onnx"
    link.symlink_to("/dev/zero")
    assert "character device" in load_error(link)
