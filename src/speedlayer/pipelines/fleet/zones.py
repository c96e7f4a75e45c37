"""Speed-limit zones: a small table of rectangles, looked up with a JVM expression.

The zones table is joined to the stream as a lookup expression (first matching rectangle wins,
in file order) rather than a broadcast join: it costs no shuffle, no Python, and it is the one
form of stream-static join that Spark's continuous mode accepts.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pyspark.sql import Column
from pyspark.sql import functions as F

from speedlayer.core.errors import ConfigError

COLUMNS = ("zone_id", "name", "min_lat", "max_lat", "min_lon", "max_lon", "speed_limit_kmh")
#: the zones CSV's columns as Spark reads them
ZONES_DDL = ", ".join(f"{c} string" if c in ("zone_id", "name") else f"{c} double" for c in COLUMNS)


@dataclass(frozen=True)
class Zone:
    zone_id: str
    name: str
    min_lat: float
    max_lat: float
    min_lon: float
    max_lon: float
    speed_limit_kmh: float


def _parse(rows: list[dict[str, str]], where: str) -> tuple[Zone, ...]:
    zones = []
    for number, row in enumerate(rows, start=2):
        try:
            zone = Zone(
                zone_id=row["zone_id"].strip(), name=row["name"].strip(),
                **{k: float(row[k]) for k in COLUMNS[2:]},
            )
        except (KeyError, ValueError, AttributeError):
            raise ConfigError(f"{where} line {number}: expected columns {', '.join(COLUMNS)} "
                              "with numeric bounds and limit") from None
        if not (zone.min_lat <= zone.max_lat and zone.min_lon <= zone.max_lon) or zone.speed_limit_kmh <= 0:
            raise ConfigError(f"{where} line {number}: bounds must satisfy min <= max and the limit must be positive")
        zones.append(zone)
    if not zones:
        raise ConfigError(f"{where} has no zones: add at least one row ({', '.join(COLUMNS)})")
    return tuple(zones)


@lru_cache(maxsize=8)
def load_zones(path: str | None = None) -> tuple[Zone, ...]:
    """Zones from a CSV file, or the Berlin table shipped with the package when ``path`` is None.

    >>> load_zones()[0].zone_id
    'Z01'
    """
    if path is None:
        text = resources.files("speedlayer.data").joinpath("zones.csv").read_text()
        where = "built-in zones table"
    else:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"zones file {path} does not exist: give a CSV with columns {', '.join(COLUMNS)}")
        text, where = file.read_text(), f"zones file {path}"
    return _parse(list(csv.DictReader(text.splitlines())), where)


def zones_file(path: str | None = None) -> Path:
    """The zones CSV a run reads: ``path``, or the built-in table's file.

    >>> zones_file().name
    'zones.csv'
    """
    return Path(path).resolve() if path else Path(str(resources.files("speedlayer.data").joinpath("zones.csv")))


def _sql_double(value: float) -> str:
    """A double as Spark SQL writes it (``52.5D``: a bare ``52.5`` is a decimal)."""
    return f"{float(value)!r}D" if math.isfinite(value) else f"CAST('{float(value)!r}' AS DOUBLE)"


def zone_of(lat: str, lon: str, zones: tuple[Zone, ...] | None = None) -> tuple[Column, Column, Column]:
    """Columns (zone_id, zone_name, speed_limit_kmh) of the first zone containing the point of the columns
    named ``lat`` and ``lon``. Outside every zone all three are null.

    Each of the three holds the whole lookup; to add all three to a DataFrame, compute ``zone_index``
    once in a column and read them from it with ``zone_fields`` (as ``with_speed_limit`` does).

    >>> zone_id, zone_name, limit = zone_of("lat", "lon")  # doctest: +SKIP
    """
    zones = zones or load_zones()
    return zone_fields(zone_index(lat, lon, zones), zones)


def zone_index(lat: str, lon: str, zones: tuple[Zone, ...] | None = None) -> Column:
    """The position in ``zones`` (from 0) of the first zone containing the point, or null outside every zone.

    >>> events.select("*", zone_index("lat", "lon").alias("zone"))  # doctest: +SKIP
    """
    zones = zones or load_zones()
    # one SQL expression is one call into the JVM; the same CASE built from Column calls takes dozens per zone
    branches = " ".join(
        f"WHEN `{lat}` BETWEEN {_sql_double(z.min_lat)} AND {_sql_double(z.max_lat)} "
        f"AND `{lon}` BETWEEN {_sql_double(z.min_lon)} AND {_sql_double(z.max_lon)} "
        f"THEN {i}" for i, z in enumerate(zones))
    return F.expr(f"CASE {branches} END")


def zone_fields(index: Column, zones: tuple[Zone, ...] | None = None) -> tuple[Column, Column, Column]:
    """(zone_id, zone_name, speed_limit_kmh) of the zone at ``index`` (a ``zone_index``); null for a null index.

    >>> zone_id, zone_name, limit = zone_fields(F.col("zone"))  # doctest: +SKIP
    """
    zones = zones or load_zones()

    def at(values: list) -> Column:
        return F.get(F.array(*(F.lit(v) for v in values)), index)

    return (at([z.zone_id for z in zones]), at([z.name for z in zones]),
            at([float(z.speed_limit_kmh) for z in zones]))
