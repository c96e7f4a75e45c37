"""Stateful processors (``transformWithStateInPandas``): per-key state, timers, initial state, TTL."""
