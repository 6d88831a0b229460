"""edge_sdk: deploy vision models onto edge boxes."""

__version__ = "0.1.0"
