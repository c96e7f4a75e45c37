"""How many partitions a run's small, frequent jobs get on this machine.

>>> machine_partitions() >= 2
True
"""

from __future__ import annotations

import os


def machine_partitions() -> int:
    """One per core, at least two: what a shuffle or a Delta snapshot of a stream's batch needs, not Spark's 200
    or Delta's 50 (on 2 cores those are 200 or 50 tiny tasks per batch)."""
    return max(2, os.cpu_count() or 2)
