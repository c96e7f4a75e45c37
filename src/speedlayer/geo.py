"""Distances on the globe as Spark expressions (no Python per row)."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

EARTH_RADIUS_KM = 6371.0088  # the IUGG mean radius


def haversine_km(lat1: Column, lon1: Column, lat2: Column, lon2: Column) -> Column:
    """Great-circle distance in km between two points given in degrees.

    Works on plain columns and on the fields of lambda variables inside higher-order functions.

    >>> df.select(haversine_km(F.lit(52.52), F.lit(13.405), F.lit(52.50), F.lit(13.40)))  # doctest: +SKIP
    """
    dlat = F.radians(lat2 - lat1)
    dlon = F.radians(lon2 - lon1)
    a = F.pow(F.sin(dlat / 2), 2) + F.cos(F.radians(lat1)) * F.cos(F.radians(lat2)) * F.pow(F.sin(dlon / 2), 2)
    return F.lit(2 * EARTH_RADIUS_KM) * F.asin(F.least(F.lit(1.0), F.sqrt(a)))


def path_length_km(points: Column) -> Column:
    """Sum of the haversine distances between consecutive elements of an array of (lat, lon) structs.

    >>> df.select(path_length_km(F.array_sort(F.collect_list(F.struct("event_time", "lat", "lon")))))  # doctest: +SKIP
    """
    legs = F.size(points) - 1
    return F.aggregate(
        F.zip_with(F.slice(points, 1, legs), F.slice(points, 2, legs),
                   lambda a, b: haversine_km(a["lat"], a["lon"], b["lat"], b["lon"])),
        F.lit(0.0),
        lambda total, leg: total + leg,
    )
