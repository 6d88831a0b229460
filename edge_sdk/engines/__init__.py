"""Engines: backends that build ONNX models into cached engines and run them (see engine.py)."""
