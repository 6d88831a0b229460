"""Bandwidth-aware offload: split inference between an edge box and cloud workers over MQTT.

It builds on edge_sdk (engines, pipelines, MQTT, the fleet's broker security) and edge_sdk never
imports it. So far:
- `partition.py`: where a model can be cut, each cut's bytes, the head and tail models of a cut;
- `tensor_codec.py`: the message a split sends (versioned header, fp32/fp16/int8 tensors, zstd);
- `link_estimator.py`: bandwidth and RTT from the agent's own traffic (fast and slow EWMAs, the worse
  one trusted, outliers held back until confirmed).
"""
