"""Backends: how a model becomes an engine on one runtime library. The contract every backend fills
(backend.py, runner.py), the one table of them (registry.py), each backend in its own sub-package, and
the INT8 toolkit (int8/) and calibration data (calibration/) that backends quantise with."""
