"""Turn source frames (BGR uint8 HxWx3) into the tensor a model input expects."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from edge_sdk.engines.tensor_meta import TensorMeta
from edge_sdk.errors import ModelError


class PreprocessSpec(BaseModel):
    """What the model expects; stated once in the pipeline file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resize: tuple[int, int] | None = Field(
        None, description="[width, height] the model takes; null feeds frames at their own size."
    )
    color: Literal["rgb", "bgr"] = Field("rgb", description="Channel order the model was trained on.")
    layout: Literal["nhwc", "nchw"] = Field("nhwc", description="Tensor layout of the model input.")
    dtype: Literal["uint8", "float32"] = Field("uint8", description="Element type of the model input.")
    scale: float = Field(1.0, description="Multiply pixel values by this (float32 only), e.g. 1/255.")
    mean: tuple[float, float, float] | None = Field(None, description="Subtract per channel after scaling.")
    std: tuple[float, float, float] | None = Field(None, description="Divide per channel after the mean.")

    @field_validator("scale", "mean", "std")
    @classmethod
    def _float_only(cls, value: object, info: ValidationInfo) -> object:
        unchanged = value is None or (info.field_name == "scale" and value == 1.0)
        if info.data.get("dtype") == "uint8" and not unchanged:
            raise ValueError(f"expected no {info.field_name} for uint8 input (it applies to dtype: float32)")
        return value


class Preprocessor:
    """Applies a `PreprocessSpec` to one frame; checked against the model input when built."""

    def __init__(self, spec: PreprocessSpec, model_input: TensorMeta):
        check_input_fits(spec, model_input)
        self.spec = spec
        self.model_input = model_input

    def __call__(self, image: np.ndarray) -> np.ndarray:
        """One BGR uint8 HxWx3 frame -> a batch of one in the model's layout and dtype."""
        import cv2

        spec = self.spec
        if spec.resize and (image.shape[1], image.shape[0]) != spec.resize:
            image = cv2.resize(image, spec.resize, interpolation=cv2.INTER_LINEAR)
        if spec.color == "rgb":
            image = image[:, :, ::-1]
        tensor: np.ndarray = image
        if spec.dtype == "float32":
            tensor = image.astype(np.float32) * np.float32(spec.scale)
            if spec.mean is not None:
                tensor -= np.asarray(spec.mean, dtype=np.float32)
            if spec.std is not None:
                tensor /= np.asarray(spec.std, dtype=np.float32)
        if spec.layout == "nchw":
            tensor = tensor.transpose(2, 0, 1)
        return np.ascontiguousarray(tensor[np.newaxis])


def check_input_fits(spec: PreprocessSpec, model_input: TensorMeta) -> None:
    """Raise ModelError, saying what the model expects and what the pipeline feeds, on a mismatch."""
    feeds = f"the pipeline feeds {spec.dtype} {spec.layout.upper()} frames"
    shape = model_input.shape
    if len(shape) != 4:
        raise ModelError(f"model input {model_input.describe()} is not an image batch (4 dimensions); {feeds}")
    if model_input.dtype != np.dtype(spec.dtype):
        raise ModelError(
            f"model input {model_input.describe()} expects {model_input.dtype.name}; {feeds} "
            "(set preprocess.dtype, scale, mean and std)"
        )
    channel_axis, spatial = (3, (1, 2)) if spec.layout == "nhwc" else (1, (2, 3))
    if isinstance(shape[channel_axis], int) and shape[channel_axis] != 3:
        raise ModelError(
            f"model input {model_input.describe()} has {shape[channel_axis]} on the channel axis of "
            f"{spec.layout.upper()}; {feeds} with 3 channels (check preprocess.layout)"
        )
    height, width = shape[spatial[0]], shape[spatial[1]]
    if isinstance(height, int) and isinstance(width, int):
        if spec.resize is None:
            raise ModelError(
                f"model input {model_input.describe()} takes {width}x{height} images; "
                f"set preprocess.resize: [{width}, {height}]"
            )
        if tuple(spec.resize) != (width, height):
            raise ModelError(
                f"model input {model_input.describe()} takes {width}x{height} images, "
                f"preprocess.resize gives {spec.resize[0]}x{spec.resize[1]}"
            )
