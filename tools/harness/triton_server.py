"""A Triton Inference Server for tests and benches: NVIDIA's own tritonserver (bundled by the
nvidia-pytriton wheel) serving one ONNX model through ONNX Runtime, with Triton's dynamic batcher.

Runs under `.venv-triton/bin/python` (pytriton needs numpy<2; `make .venv-triton/.ready` builds it),
never imported by the SDK or its venv. Prints one JSON line {"grpc": port, "http": port} once the server
is ready, then serves until SIGTERM/SIGINT.

    .venv-triton/bin/python tools/harness/triton_server.py MODEL.onnx --name NAME \
        --grpc-port 8001 --http-port 8000 --metrics-port 8002 --max-batch 8 --queue-delay-us 2000

--garbage-when FILE: while FILE exists and holds "names" or "shapes", the model answers wrongly in
that way (its configuration still says what it should answer), to test what a client does
with an answer it cannot use from a server it checked at start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, QueuePolicy, Tensor, TimeoutAction
from pytriton.triton import Triton, TritonConfig

ONNX_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def per_sample(shape: list[Any]) -> tuple[int, ...]:
    """The ONNX shape without its batch axis, unknown sizes as -1; a scalar per sample becomes (1,)
    (Triton has no empty dims), and `infer` reshapes to match."""
    dims = tuple(d if isinstance(d, int) and d > 0 else -1 for d in shape[1:])
    return dims or (1,)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--name", required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--max-batch", type=int, default=8, help="Triton's max_batch_size")
    parser.add_argument("--queue-delay-us", type=int, default=2000, help="dynamic_batching's max_queue_delay")
    parser.add_argument("--max-queue-size", type=int, default=0, help="requests queued at most, beyond rejected")
    parser.add_argument("--queue-timeout-us", type=int, default=0, help="a request queued longer is rejected")
    parser.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0: its default)")
    parser.add_argument("--instances", type=int, default=1, help="model instances (concurrent calls)")
    parser.add_argument("--garbage-when", type=Path)
    parser.add_argument("--log-file", type=Path, required=True)
    args = parser.parse_args()
    # Triton's Python backend stub links libpython3.X.so and finds this venv's standard library: it must
    # load the libpython of the Python this venv was made from (another patch release of 3.X, say the
    # distribution's, fails inside multiprocessing), so that one comes first on the library path.
    libdir = sysconfig.get_config_var("LIBDIR")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir:
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [libdir, os.environ.get("LD_LIBRARY_PATH")]))

    options = onnxruntime.SessionOptions()
    if args.threads:
        options.intra_op_num_threads = args.threads
    session = onnxruntime.InferenceSession(str(args.model), options, providers=["CPUExecutionProvider"])
    onnx_inputs, onnx_outputs = session.get_inputs(), session.get_outputs()
    scalar_outputs = {o.name for o in onnx_outputs if len(o.shape) <= 1}

    @batch
    def infer(**feed: np.ndarray) -> dict[str, np.ndarray]:
        values = session.run(None, feed)
        outputs = {}
        for meta, value in zip(onnx_outputs, values, strict=True):
            if meta.name in scalar_outputs:
                value = value.reshape(-1, 1)
            outputs[meta.name] = value
        return garbage(outputs)

    def garbage(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        mode = args.garbage_when.read_text().strip() if args.garbage_when and args.garbage_when.exists() else ""
        if mode == "names":
            return {f"wrong_{name}": value for name, value in outputs.items()}
        if mode == "shapes":  # an axis more than the model has (Triton itself casts a wrong dtype back)
            return {name: np.stack([value, value], axis=-1) for name, value in outputs.items()}
        return outputs

    inputs = [Tensor(name=i.name, dtype=ONNX_TYPES[i.type], shape=per_sample(i.shape)) for i in onnx_inputs]
    outputs = [
        Tensor(name=o.name, dtype=ONNX_TYPES[o.type], shape=tuple(-1 for _ in per_sample(o.shape)))
        for o in onnx_outputs
    ]
    config = TritonConfig(
        grpc_port=args.grpc_port,
        http_port=args.http_port,
        metrics_port=args.metrics_port,
        log_file=args.log_file,
        log_verbose=0,
        exit_timeout_secs=2,
    )
    model_config = ModelConfig(
        max_batch_size=args.max_batch,
        batcher=DynamicBatcher(
            max_queue_delay_microseconds=args.queue_delay_us,
            default_queue_policy=QueuePolicy(
                timeout_action=TimeoutAction.REJECT,
                default_timeout_microseconds=args.queue_timeout_us,
                max_queue_size=args.max_queue_size,
            ),
        ),
    )

    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    with Triton(config=config) as triton:
        triton.bind(
            model_name=args.name,
            infer_func=[infer] * args.instances,
            inputs=inputs,
            outputs=outputs,
            config=model_config,
            strict=False,
        )
        triton.run()  # returns once the server and the model are ready
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, on_signal)
        print(json.dumps({"grpc": args.grpc_port, "http": args.http_port, "pid": os.getpid()}), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    sys.exit(0)


if __name__ == "__main__":
    main()
