"""The runtime: settings, the SparkSession, triggers, planning and validating a run, starting and stopping it."""
