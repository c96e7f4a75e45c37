"""Helpers for testing speedlayer jobs, sources and sinks, usable from your own pytest suite.

- ``assert_stream_equals_batch`` (``jobs``): a job's stream equals its batch run on the same events.
- ``ScriptedStream`` (``scripted``): feed a stream step by step; each step tells what it emitted,
  the watermark, late events and dead letters.
- ``check_source_replay`` (``source_check``): a source reads the same rows for the same offsets,
  one offset per row.
- ``check_sink_idempotent`` (``sink_check``): a sink holds what its output mode says, and a batch
  written again changes nothing (exactly-once) or only adds duplicates (at-least-once).
- ``local_session`` (``session``): one SparkSession for a test suite, with speedlayer's settings.
- ``speedlayer.testing.cluster``: a Spark standalone cluster on loopback (``StandaloneCluster``).

Failed checks raise ``CheckFailed`` subclasses (``errors``): AssertionErrors whose message says what to change.
"""

from speedlayer.testing.cluster import StandaloneCluster, bare_environment, descendants, free_port, processes
from speedlayer.testing.collect import CollectSink
from speedlayer.testing.errors import (
    CheckFailed,
    NothingCompared,
    OffsetProblem,
    ReplayMismatch,
    SinkContentMismatch,
    SinkNotIdempotent,
    StreamBatchMismatch,
)
from speedlayer.testing.jobs import Compared, assert_stream_equals_batch
from speedlayer.testing.scripted import ScriptedStream, Step
from speedlayer.testing.session import local_session
from speedlayer.testing.sink_check import SinkReport, check_sink_idempotent
from speedlayer.testing.source_check import SourceReport, check_source_replay

__all__ = [
    "CheckFailed", "CollectSink", "Compared", "NothingCompared", "OffsetProblem", "ReplayMismatch", "SinkContentMismatch",
    "ScriptedStream", "SinkNotIdempotent", "SinkReport", "SourceReport", "StandaloneCluster", "Step", "StreamBatchMismatch",
    "assert_stream_equals_batch", "bare_environment", "check_sink_idempotent", "check_source_replay", "descendants",
    "free_port", "local_session", "processes",
]
