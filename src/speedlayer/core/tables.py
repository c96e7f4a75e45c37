"""A table speedlayer can read back in batch: what a run committed (a Parquet or Delta directory) or a
job's static input (its zones, its profiles), by format, path and reader options.

A run records its tables in its manifest, so ``speedlayer sql`` shows them as views whether the run
is alive or not (``speedlayer.runtime.sql_views``).

>>> TableRef("parquet", "/data/windows").record()
{'format': 'parquet', 'path': '/data/windows', 'options': {}, 'schema': None, 'packages': [], 'conf': {}}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def sql_name(name: str) -> str:
    """An output's or a table's name as SQL names its view: every character but letters, digits and
    ``_`` becomes ``_``.

    >>> sql_name("dead-letters")
    'dead_letters'
    """
    return re.sub(r"[^0-9A-Za-z_]", "_", name)


@dataclass(frozen=True)
class TableRef:
    """A table in files: Spark's reader ``format``, its ``path``, reader ``options`` and ``schema`` (DDL;
    None: the files' own); the Maven ``packages`` and session ``conf`` a reader needs (Delta's).

    >>> TableRef("csv", "zones.csv", {"header": "true"}).options["header"]
    'true'
    """

    format: str
    path: str
    options: Mapping[str, str] = field(default_factory=dict)
    schema: str | None = None
    packages: tuple[str, ...] = ()
    conf: Mapping[str, str] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """What a manifest keeps of it (JSON)."""
        return {"format": self.format, "path": self.path, "options": dict(self.options), "schema": self.schema,
                "packages": list(self.packages), "conf": dict(self.conf)}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TableRef:
        """The table a manifest recorded (``record``'s inverse).

        >>> TableRef.from_record({"format": "delta", "path": "/t"})
        TableRef(format='delta', path='/t', options={}, schema=None, packages=(), conf={})
        """
        return cls(str(record["format"]), str(record["path"]), dict(record.get("options") or {}),
                   record.get("schema"), tuple(record.get("packages") or ()), dict(record.get("conf") or {}))

    def read(self, spark: Any) -> Any:
        """The table as a batch DataFrame of ``spark`` (a classic or a Spark Connect session).

        >>> TableRef("parquet", "out/windows").read(spark).count()  # doctest: +SKIP
        """
        reader = spark.read.format(self.format).options(**self.options)
        return (reader.schema(self.schema) if self.schema else reader).load(self.path)
