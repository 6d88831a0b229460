"""Serving governance: how a worker or a pipeline decides what to run when load changes.

- `batching`: batch size and queue delay chosen under a latency SLO from measured batch latency and
  arrival rate, with explicit, counted load shedding past what the hardware carries;
- `model_cache`: engines kept within a memory budget (LRU with pinning and a minimum residency);
- `breaker`: the circuit breaker that sends frames to a lighter fallback model.

Pure policy: these modules hold no engine, socket or thread of their own, so the inference stage,
the inline loop and the offload worker share them and tests drive them with a clock.
"""
