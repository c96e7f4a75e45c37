"""speedlayer: real-time stream processing on Spark Structured Streaming.

Sources turn an ingestion system into a raw stream, ``decode`` validates it, a pipeline (a pure
DataFrame function) computes named outputs, sinks deliver them, and the runner wires it all.
"""

__version__ = "0.1.0"
