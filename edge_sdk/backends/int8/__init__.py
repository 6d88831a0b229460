"""The INT8 toolkit backends quantise with: the accuracy gate, the calibration range check, per-layer
sensitivity and the mixed-precision search. It reaches a backend's quantiser only through its hook."""
