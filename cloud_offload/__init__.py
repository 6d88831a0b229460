"""Bandwidth-aware offload: split inference between an edge box and cloud workers over MQTT.

It builds on edge_sdk (engines, pipelines, MQTT, the fleet's broker security) and edge_sdk never
imports it. So far: the partition planner (`partition.py`), which finds where a model can be cut and
makes the head and tail models of a cut.
"""
