"""The core layer: shared types every other layer may import (see docs/architecture.md)."""
