"""Turn source frames (BGR uint8 HxWx3) into the tensor a model input expects.

Two ways, one interface (`FrameFeed`): `Preprocessor` does it in numpy/cv2 in the inference worker;
`FramePacker` hands raw frames to an engine whose graph does it (`preprocess.fold`, see
edge_sdk/graph/preprocess_folding.py). Both place the frame in the model input the same way
(`input_geometry`), so post-processing maps boxes back identically.
"""

from __future__ import annotations

from typing import Annotated, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from edge_sdk.core.errors import ModelError
from edge_sdk.core.geometry import InputGeometry
from edge_sdk.core.tensor_meta import TensorMeta

MAX_INPUT_SIDE = 8192
"""Widest or tallest model input, in pixels: one 8192x8192 float32 frame is already 805 MB."""
MAX_NORMALISATION = 1e6
"""Bound on scale, |mean| and std: far beyond any real normalisation, well inside float32."""

InputSide = Annotated[int, Field(ge=1, le=MAX_INPUT_SIDE, strict=True)]
MeanValue = Annotated[float, Field(ge=-MAX_NORMALISATION, le=MAX_NORMALISATION, strict=True)]
StdValue = Annotated[float, Field(gt=0, le=MAX_NORMALISATION, strict=True)]


class PreprocessSpec(BaseModel):
    """What the model expects; stated once in the pipeline file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resize: tuple[InputSide, InputSide] | None = Field(
        None,
        description=f"[width, height] the model takes, each side 1..{MAX_INPUT_SIDE}; null feeds frames at their "
        "own size.",
    )
    resize_mode: Literal["stretch", "letterbox"] = Field(
        "stretch", description="stretch to the size, or keep the aspect ratio and pad (YOLO-style letterbox)."
    )
    pad_value: int = Field(114, ge=0, le=255, strict=True, description="Grey level of letterbox padding, 0..255.")
    color: Literal["rgb", "bgr"] = Field("rgb", description="Channel order the model was trained on.")
    layout: Literal["nhwc", "nchw"] = Field("nhwc", description="Tensor layout of the model input.")
    dtype: Literal["uint8", "float32"] = Field("uint8", description="Element type of the model input.")
    scale: float = Field(
        1.0,
        gt=0,
        le=MAX_NORMALISATION,
        strict=True,
        description=f"Multiply pixel values by this (float32 only), e.g. 1/255; 0 < scale <= {MAX_NORMALISATION:g}.",
    )
    mean: tuple[MeanValue, MeanValue, MeanValue] | None = Field(
        None, description=f"Subtract per channel after scaling; each -{MAX_NORMALISATION:g}..{MAX_NORMALISATION:g}."
    )
    std: tuple[StdValue, StdValue, StdValue] | None = Field(
        None, description=f"Divide per channel after the mean; each 0 < std <= {MAX_NORMALISATION:g}."
    )
    fold: bool = Field(
        True,
        description="Fold this preprocessing into the engine graph, so raw BGR uint8 frames go in and the "
        "resize, colour swap, layout change, cast and normalisation run inside the engine (normalisation "
        "goes into the first convolution's weights where exact); false = numpy/cv2 in the inference worker. "
        "Not used for cascade.preprocess (crops are always preprocessed in numpy).",
    )

    @field_validator("scale", "mean", "std")
    @classmethod
    def _float_only(cls, value: object, info: ValidationInfo) -> object:
        unchanged = value is None or (info.field_name == "scale" and value == 1.0)
        if info.data.get("dtype") == "uint8" and not unchanged:
            raise ValueError(f"expected no {info.field_name} for uint8 input (it applies to dtype: float32)")
        return value


def input_geometry(spec: PreprocessSpec, frame_width: int, frame_height: int) -> InputGeometry:
    """Where a frame of this size lands in the model input (the folded graph computes the same)."""
    if not spec.resize:
        return InputGeometry.identity(frame_width, frame_height)
    width, height = spec.resize
    if spec.resize_mode == "stretch":
        return InputGeometry(width, height, width / frame_width, height / frame_height)
    scale = min(width / frame_width, height / frame_height)
    pad_x = (width - round(frame_width * scale)) // 2
    pad_y = (height - round(frame_height * scale)) // 2
    return InputGeometry(width, height, scale, scale, pad_x, pad_y)


class FrameFeed(Protocol):
    """What an inference worker does to a frame before the engine."""

    def __call__(self, image: np.ndarray) -> np.ndarray:
        """One BGR uint8 HxWx3 frame -> a batch of one for the engine's input."""
        ...

    def geometry(self, frame_width: int, frame_height: int) -> InputGeometry:
        """Where a frame of this size lands in the model input."""
        ...


def frame_feed(spec: PreprocessSpec, engine_input: TensorMeta) -> FrameFeed:
    """The feed for an engine built with this spec: raw frames when it folded the preprocessing."""
    return FramePacker(spec, engine_input) if spec.fold else Preprocessor(spec, engine_input)


class FramePacker:
    """For engines with the preprocessing folded in: the raw frame, as a batch of one (no copy when
    the frame is contiguous)."""

    def __init__(self, spec: PreprocessSpec, engine_input: TensorMeta):
        raw = PreprocessSpec(layout="nhwc", dtype="uint8", color="bgr")
        try:
            check_input_fits(raw, engine_input)
        except ModelError as exc:
            raise ModelError(f"expected an engine that takes raw frames (preprocess.fold: true), got {exc}") from None
        self.spec = spec
        self.engine_input = engine_input

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(image[np.newaxis])

    def geometry(self, frame_width: int, frame_height: int) -> InputGeometry:
        return input_geometry(self.spec, frame_width, frame_height)


class Preprocessor:
    """Applies a `PreprocessSpec` to one frame with numpy/cv2; checked against the model input when built."""

    def __init__(self, spec: PreprocessSpec, model_input: TensorMeta):
        check_input_fits(spec, model_input)
        self.spec = spec
        self.model_input = model_input

    def geometry(self, frame_width: int, frame_height: int) -> InputGeometry:
        """Where a frame of this size lands in the model input."""
        return input_geometry(self.spec, frame_width, frame_height)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        """One BGR uint8 HxWx3 frame -> a batch of one in the model's layout and dtype."""
        import cv2

        spec = self.spec
        if spec.resize and (image.shape[1], image.shape[0]) != spec.resize:
            if spec.resize_mode == "stretch":
                image = cv2.resize(image, spec.resize, interpolation=cv2.INTER_LINEAR)
            else:
                image = self._letterbox(image)
        if spec.color == "rgb":
            image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)  # ~50x faster than a numpy [::-1] plus copy
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

    def _letterbox(self, image: np.ndarray) -> np.ndarray:
        import cv2

        geometry = self.geometry(image.shape[1], image.shape[0])
        inner = (round(image.shape[1] * geometry.scale_x), round(image.shape[0] * geometry.scale_y))
        canvas = np.full((geometry.input_height, geometry.input_width, 3), self.spec.pad_value, dtype=np.uint8)
        x, y = int(geometry.pad_x), int(geometry.pad_y)
        canvas[y : y + inner[1], x : x + inner[0]] = cv2.resize(image, inner, interpolation=cv2.INTER_LINEAR)
        return canvas


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
