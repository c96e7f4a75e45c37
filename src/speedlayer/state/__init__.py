"""Generic stateful processors (``transformWithStateInPandas``); a job's own live with the job (``pipelines.fleet``)."""
