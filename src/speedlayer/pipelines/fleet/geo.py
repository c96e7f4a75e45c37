"""Distances on the globe: as Spark expressions (no Python per row), and over numpy arrays."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from pyspark.sql import Column
from pyspark.sql import functions as F

EARTH_RADIUS_KM = 6371.0088  # the IUGG mean radius


class _Maths(NamedTuple):
    """The functions the haversine formula needs, from one library."""

    radians: Callable
    sin: Callable
    cos: Callable
    asin: Callable
    sqrt: Callable
    at_most_one: Callable


#: Spark column expressions (no Python per row), and numpy arrays or floats (state processors)
SPARK = _Maths(F.radians, F.sin, F.cos, F.asin, F.sqrt, lambda x: F.least(F.lit(1.0), x))
NUMPY = _Maths(np.radians, np.sin, np.cos, np.arcsin, np.sqrt, lambda x: np.minimum(1.0, x))


def haversine_km(lat1, lon1, lat2, lon2, maths: _Maths = SPARK):
    """Great-circle distance in km between two points given in degrees: Spark columns, or with
    ``maths=NUMPY`` numpy arrays or floats.

    On columns it works on plain columns and on the fields of lambda variables inside higher-order functions.

    >>> round(float(haversine_km(52.52, 13.405, 52.52, 13.505, NUMPY)), 3)
    6.766
    >>> df.select(haversine_km(F.lit(52.52), F.lit(13.405), F.lit(52.50), F.lit(13.40)))  # doctest: +SKIP
    """
    p1, p2 = maths.radians(lat1), maths.radians(lat2)
    dp, dl = p2 - p1, maths.radians(lon2 - lon1)
    a = maths.sin(dp / 2) ** 2 + maths.cos(p1) * maths.cos(p2) * maths.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * maths.asin(maths.at_most_one(maths.sqrt(a)))


#: metres per degree of latitude on the sphere of ``EARTH_RADIUS_KM``
M_PER_DEG_LAT = math.pi * EARTH_RADIUS_KM * 1000 / 180


def _cell_row(lat: Column, cell_m: float) -> Column:
    return F.floor(lat * M_PER_DEG_LAT / cell_m)


def _cell_col(lon: Column, row: Column, cell_m: float) -> Column:
    # East-west metres are scaled by the cosine of the row's central latitude, the same for every
    # point of the row, so two points in one row share a column exactly when they are in one cell.
    centre_lat = (row + 0.5) * (cell_m / M_PER_DEG_LAT)
    return F.floor(lon * M_PER_DEG_LAT * F.cos(F.radians(centre_lat)) / cell_m)


def grid_cell(lat: Column, lon: Column, cell_m: float) -> tuple[Column, Column]:
    """(row, col) of the grid cell of about ``cell_m`` × ``cell_m`` metres a point lies in.

    Rows are bands of latitude ``cell_m`` high; each row is cut into columns ``cell_m`` wide at its
    central latitude. (No wrap-around at the antimeridian.)

    >>> row, col = grid_cell(F.col("lat"), F.col("lon"), 500.0)  # doctest: +SKIP
    """
    row = _cell_row(lat, cell_m)
    return row, _cell_col(lon, row, cell_m)


def nearby_cells(lat: Column, lon: Column, cell_m: float) -> Column:
    """An array of the 3 × 3 cells (structs ``row``, ``col``) around a point: its cell and the eight next to it.

    Every point within ``cell_m`` metres of the point lies in one of them, so joining on them and
    then keeping the pairs within ``cell_m`` finds every neighbour, cell borders or not.
    """
    row = _cell_row(lat, cell_m)
    cells = []
    for d_row in (-1, 0, 1):
        r = row + d_row
        col = _cell_col(lon, r, cell_m)
        cells.extend(F.struct(r.alias("row"), (col + d_col).alias("col")) for d_col in (-1, 0, 1))
    return F.array(*cells)
