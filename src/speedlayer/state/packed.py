"""What the group-of-vehicles processors share: Arrow tables packed into a state value, and vehicles' runs of rows.

A processor keyed by a group of vehicles keeps its vehicles' records and waiting pings as Arrow IPC
bytes in one value, and applies pings vehicle by vehicle from one frame sorted by vehicle.

>>> from_bytes(to_bytes(pa.table({"x": [1, 2]}))).column("x").to_pylist()
[1, 2]
>>> vehicle_runs(np.array(["V1", "V1", "V2"]))
[(0, 2), (2, 3)]
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def to_bytes(table: pa.Table) -> bytes:
    """``table`` as Arrow IPC stream bytes (a ``binary`` field of a state value)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_bytes(data: bytes) -> pa.Table:
    """The table of ``to_bytes``."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def vehicle_runs(vehicles: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of equal values in ``vehicles`` (a column sorted by vehicle)."""
    if not len(vehicles):
        return []
    bounds = np.concatenate(([0], np.flatnonzero(vehicles[1:] != vehicles[:-1]) + 1, [len(vehicles)]))
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))
