"""What the tests share: private brokers and their fixtures, bounded waits, and client helpers.

The broker process itself, the synthetic models and the simulated devices live in tools/harness/,
which the benchmarks use too; this package holds only the test side (pytest fixtures, waits, inboxes).
"""
