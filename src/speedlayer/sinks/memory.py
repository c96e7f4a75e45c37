"""``memory:`` or ``memory:TABLE`` — Spark's in-memory sink, queryable as ``spark.table(TABLE)``.

For tests and notebooks: rows live in driver memory and are lost with the process.
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from speedlayer.core.errors import ConfigError
from speedlayer.core.modes import APPEND, COMPLETE
from speedlayer.core.uris import Uri
from speedlayer.sinks.base import AT_LEAST_ONCE, Sink, Target, no_options


class MemorySink(Sink):
    scheme = "memory"
    summary = "an in-memory table of the session (tests, notebooks)"
    guarantee = AT_LEAST_ONCE
    modes = (APPEND, COMPLETE)
    supports_continuous = True

    def __init__(self, uri: Uri):
        super().__init__(uri)
        no_options(uri)
        self.table = uri.path.strip("/") or None
        if self.table and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.table):
            raise ConfigError(f"memory: table name {self.table!r} must be letters, digits and underscores")

    def query_name(self, planned: str) -> str:
        """Spark's memory sink names its table after the query: a table given names the query."""
        return self.table or planned

    def start(self, writer: DataStreamWriter, df: DataFrame, target: Target) -> StreamingQuery:
        return writer.queryName(target.query_name).format("memory").start()
