"""A pipeline for the agent's tests: the deployed classifier over a live synthetic camera."""

from __future__ import annotations

from pathlib import Path


def people_pipeline(results: Path, source: str = "synthetic://?frames=100000&size=16x16&fps=20&realtime=true") -> str:
    """A pipeline of the deployed classifier over a live synthetic camera, in one process, results to JSONL."""
    return f"""name: people
model: {{path: classifier.onnx}}
preprocess: {{resize: [8, 8], layout: nchw, dtype: float32, scale: 0.00392156862745098}}
sources: [{{uri: "{source}", name: cam}}]
postprocess: {{type: classification, output: logits}}
sinks: [{{type: jsonl, path: "{results}"}}]
runtime: {{mode: inline}}
"""
