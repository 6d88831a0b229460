"""Numeric precision an engine is built for."""

from typing import Literal

Precision = Literal["fp32", "fp16", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "fp16", "int8")
