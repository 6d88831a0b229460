"""What the multi-process runtime (runtime.py) keeps of each stage it supervises."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .snapshot import StageView
from .watchdog import RestartBudget


@dataclass
class Stage:
    """One stage process: its live view, ring owner id, entry point and plan, restart budget and process."""

    view: StageView
    owner_id: int
    target: Callable[[Any], None]
    plan: Any
    budget: RestartBudget
    process: Any = None
    finished: bool = False
