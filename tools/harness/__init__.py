"""Harnesses both the benchmarks and the tests use: synthetic ONNX models, a private Mosquitto, simulated fleet devices, the fault-injection harness"""
