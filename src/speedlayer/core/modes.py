"""Spark's output modes, as every output and sink names the ones it takes."""

APPEND, UPDATE, COMPLETE = "append", "update", "complete"
OUTPUT_MODES = (APPEND, UPDATE, COMPLETE)
