"""Frame sources, chosen by URI scheme (see registry.py)."""
