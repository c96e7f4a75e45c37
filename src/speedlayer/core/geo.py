"""Distances on the globe as Spark expressions (no Python per row)."""

from __future__ import annotations

import math

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
