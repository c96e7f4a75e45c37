"""``socket://host:port`` — text lines from a TCP server, for demos and tests.

Each line is one payload (``value``); ``ingest_time`` is when the driver received the line, ``key``
is empty, ``offset`` is the line's number in the run (1, 2, ...; a restart continues the count).
Micro-batch queries read through ``socket_datasource`` (a Python Data Source): the driver holds at
most ``max_buffered_lines`` lines and ``max_buffered_bytes`` bytes not yet processed; when the job
falls behind it stops reading, and TCP flow control slows the sender down: no line is dropped,
memory stays bounded. A line longer than ``max_line_bytes`` is cut to it (decode then refuses it).
Continuous mode reads with Spark's own ``socket`` source, whose buffer has no bound, and whose
``offset`` is a random UUID per line.

It is **not fault-tolerant**: lines not yet processed are held in driver memory only, so they are
lost on a failure or restart, and a restart cannot replay anything. Every output of a job is its
own query with its own connection, so the server must send every line to each connection
(``nc -lk`` serves one connection at a time: select one output).

    nc -lk 9999                                   # then type JSON lines
    speedlayer run fleet --source socket://localhost:9999 --sink alerts=console:
    speedlayer run wordcount --source 'socket://localhost:9999?max_buffered_lines=10000'
"""

from __future__ import annotations

import json
import socket
from contextlib import closing

from pydantic import BaseModel, Field, model_validator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from speedlayer.core.errors import ConfigError, SourceError
from speedlayer.core.uris import Uri, parse_options
from speedlayer.sources.base import Source, count_behind
from speedlayer.sources.socket_datasource import FORMAT, SocketDataSource

#: how long ``check`` waits for the server to accept a connection
CONNECT_TIMEOUT_S = 3.0


class SocketOptions(BaseModel):
    """The driver's buffer bounds (micro-batch mode): reading pauses when either is reached."""

    max_buffered_lines: int = Field(100_000, gt=0, le=100_000_000, description="lines held, not yet processed")
    max_buffered_bytes: int = Field(64 << 20, gt=0, description="bytes of lines held, not yet processed")
    max_line_bytes: int = Field(4 << 20, gt=0, description="a longer line is cut to this many bytes")

    @model_validator(mode="after")
    def _a_line_fits(self) -> SocketOptions:
        if self.max_line_bytes > self.max_buffered_bytes:
            raise ValueError(f"max_line_bytes ({self.max_line_bytes}) must not exceed max_buffered_bytes "
                             f"({self.max_buffered_bytes}): lower it, or raise max_buffered_bytes")
        return self


class SocketSource(Source):
    """``socket://host:port``: one payload per line; at-most-once (see the module docstring)."""

    scheme = "socket"
    summary = "lines of text from a TCP socket (for demos: at-most-once)"
    supports_continuous = True
    fault_tolerant = False
    supports_max_events = False
    how_to_bound = "bound a socket run with --duration"

    def __init__(self, uri: Uri):
        super().__init__(uri)
        if not uri.host or uri.port is None or uri.path not in ("", "/"):
            raise ConfigError(f"{uri.display}: write socket://host:port, e.g. socket://localhost:9999")
        self.options = parse_options(SocketOptions, uri.options, "socket://")
        self.host, self.port = uri.host, uri.port

    def describe(self) -> str:
        return f"socket {self.host}:{self.port} (text lines, not fault-tolerant)"

    def warnings(self) -> list[str]:
        notes = [f"socket://{self.host}:{self.port} is not fault-tolerant: lines not yet processed are lost on a "
                 "failure or restart, and each output opens its own connection"]
        if self.continuous:
            notes.append("in continuous mode Spark's own socket source reads the lines: its buffer has no bound "
                         "(max_buffered_lines applies to micro-batch triggers only)")
        return notes

    def lag(self, progress_source: dict) -> int | None:
        """Lines received and held beyond the batch just read (micro-batch mode).

        >>> from speedlayer.core.uris import parse_uri
        >>> SocketSource(parse_uri("socket://h:1")).lag({"endOffset": {"lines": 5}, "latestOffset": {"lines": 9}})
        4
        """
        return count_behind(progress_source, "lines")

    def check(self) -> None:
        """Fail before start when nothing accepts connections on host:port (opens and closes one).

        >>> SocketSource(parse_uri("socket://localhost:9")).check()  # doctest: +SKIP
        speedlayer.core.errors.SourceError: nothing listens on localhost:9: start e.g. `nc -lk 9` ...
        """
        try:
            with closing(socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT_S)):
                pass
        except OSError as exc:
            raise SourceError(f"nothing listens on {self.host}:{self.port} ({exc.strerror or exc}): start a line server "
                              f"first, e.g. `nc -lk {self.port}`, or fix the address") from None

    def read_stream(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        if not self.continuous:
            spec = {"host": self.host, "port": self.port, **self.options.model_dump()}
            spark.dataSource.register(SocketDataSource)
            return spark.readStream.format(FORMAT).option("spec", json.dumps(spec)).load()
        lines = (spark.readStream.format("socket").option("host", self.host).option("port", self.port)
                 .option("includeTimestamp", "true").load())
        return lines.select(
            F.col("value"),
            F.lit(None).cast("string").alias("key"),
            # Re-seeded every micro-batch by Spark, and the same if one batch's rows are computed twice.
            F.expr("uuid()").alias("offset"),
            F.col("timestamp").alias("ingest_time"),
        )
