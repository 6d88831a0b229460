"""The native TensorRT backend: ONNX -> a serialised TensorRT engine (GPU or DLA), built with the builder's
own API, and run through CUDA buffers from cuda-python or pycuda.

TensorRT is imported lazily (library.py); the CUDA half (cuda_runtime.py and its two implementations)
runs without TensorRT. docs/nvidia.md says what was run where.
"""
