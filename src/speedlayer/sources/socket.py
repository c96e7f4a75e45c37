"""``socket://host:port`` — text lines from a TCP server (Spark's ``socket`` source), for demos and tests.

Each line is one payload (``value``); ``ingest_time`` is when Spark received the line, ``key`` is
empty. ``offset`` is a random UUID that Spark's ``uuid()`` gives each line as its micro-batch reads
it: unique within the run (dead letters keyed by it never overwrite each other), but not a
position: Spark's socket source exposes none, and a batch cannot be replayed anyway. It is **not
fault-tolerant**: Spark keeps received lines in driver memory
only, so lines not yet processed are lost on a failure or restart, and a restart cannot replay
anything. Every output of a job is its own query with its own connection, so the server must
send every line to each connection (``nc -lk`` serves one connection at a time: select one output).

    nc -lk 9999                                   # then type JSON lines
    speedlayer run fleet --source socket://localhost:9999 --sink alerts=console:
"""

from __future__ import annotations

import socket
from contextlib import closing

from pydantic import BaseModel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from speedlayer.errors import ConfigError, SourceError
from speedlayer.sources.base import Source
from speedlayer.uris import Uri, parse_options

#: how long ``check`` waits for the server to accept a connection
CONNECT_TIMEOUT_S = 3.0


class SocketOptions(BaseModel):
    """The socket source takes no options."""


class SocketSource(Source):
    """``socket://host:port``: one payload per line; at-most-once (see the module docstring)."""

    scheme = "socket"
    supports_continuous = True
    fault_tolerant = False

    def __init__(self, uri: Uri):
        super().__init__(uri)
        if not uri.host or uri.port is None or uri.path not in ("", "/"):
            raise ConfigError(f"{uri.display}: write socket://host:port, e.g. socket://localhost:9999")
        parse_options(SocketOptions, uri.options, "socket://")
        self.host, self.port = uri.host, uri.port

    def describe(self) -> str:
        return f"socket {self.host}:{self.port} (text lines, not fault-tolerant)"

    def warnings(self) -> list[str]:
        return [f"socket://{self.host}:{self.port} is not fault-tolerant: lines not yet processed are lost on a "
                "failure or restart, and each output opens its own connection"]

    def check(self) -> None:
        """Fail before start when nothing accepts connections on host:port (opens and closes one).

        >>> SocketSource(parse_uri("socket://localhost:9")).check()  # doctest: +SKIP
        speedlayer.errors.SourceError: nothing listens on localhost:9: start e.g. `nc -lk 9` ...
        """
        try:
            with closing(socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT_S)):
                pass
        except OSError as exc:
            raise SourceError(f"nothing listens on {self.host}:{self.port} ({exc.strerror or exc}): start a line server "
                              f"first, e.g. `nc -lk {self.port}`, or fix the address") from None

    def read_stream(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        if max_events is not None:
            raise ConfigError("--max-events counts generated events; bound a socket run with --duration")
        lines = (spark.readStream.format("socket").option("host", self.host).option("port", self.port)
                 .option("includeTimestamp", "true").load())
        return lines.select(
            F.col("value"),
            F.lit(None).cast("string").alias("key"),
            # Re-seeded every micro-batch by Spark, and the same if one batch's rows are computed twice.
            F.expr("uuid()").alias("offset"),
            F.col("timestamp").alias("ingest_time"),
        )
