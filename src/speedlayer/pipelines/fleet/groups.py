"""Vehicles spread over a fixed number of groups: the key of a state processor that takes many vehicles per call.

A Python state processor pays a round trip to the JVM per key and call, so the fleet's processors
key their state by a group of vehicles, not by one vehicle (see ``speedlayer.state.incidents``).
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def vehicle_group(vehicle: str | Column, groups: int) -> Column:
    """Which of ``groups`` groups a vehicle belongs to, as column ``_group``: part of a checkpoint's layout.

    >>> pings.groupBy(vehicle_group("vehicle_id", 16))  # doctest: +SKIP
    """
    return F.pmod(F.xxhash64(vehicle), F.lit(groups)).alias("_group")
