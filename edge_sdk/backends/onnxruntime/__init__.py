"""ONNX Runtime backend: CPU, and the TensorRT/CUDA/CANN/OpenVINO/XNNPACK execution providers."""
