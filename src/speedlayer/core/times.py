"""Instants as text: epoch milliseconds in UTC ISO-8601, as every report and view shows them."""

from __future__ import annotations

import datetime as dt


def iso(ms: int | None) -> str | None:
    """Epoch milliseconds as UTC ISO-8601.

    >>> iso(1500)
    '1970-01-01T00:00:01.500Z'
    """
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
