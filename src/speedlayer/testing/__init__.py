"""Helpers for testing speedlayer jobs, sources and sinks, usable from your own pytest suite.

- ``speedlayer.testing.cluster``: a Spark standalone cluster on loopback (``StandaloneCluster``).
"""

from speedlayer.testing.cluster import StandaloneCluster, bare_environment, descendants, free_port, processes

__all__ = ["StandaloneCluster", "bare_environment", "descendants", "free_port", "processes"]
