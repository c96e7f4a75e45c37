"""The latency lab: ``speedlayer bench`` and ``speedlayer advise``.

``feed`` produces stamped events outside Spark, ``watch`` sees them arrive in the sink, ``lab``
runs the grid of (output, trigger, rate) cells through the runner, ``report`` prints the table and
draws the plots, ``advice`` turns a batch-cost fit into a trigger recommendation (pure math).
"""
