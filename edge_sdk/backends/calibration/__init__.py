"""Calibration for INT8 engines: data readers, settings, and the task that says how accuracy is measured."""

from .data import open_calibration_data
from .reader import CalibrationReader, Sample, SampleSet
from .settings import Calibration, Int8Settings, TaskSpec
from .setup import int8_settings, make_calibration, task_spec

__all__ = [
    "Calibration",
    "CalibrationReader",
    "Int8Settings",
    "Sample",
    "SampleSet",
    "TaskSpec",
    "int8_settings",
    "make_calibration",
    "open_calibration_data",
    "task_spec",
]
