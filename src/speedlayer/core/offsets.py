"""The order of source offsets, which decides which copy of a re-sent event counts.

Every source gives each row a replay-stable ``offset`` (``speedlayer.sources``): the generator's
event number, ``<file>:<line>``, Kafka's ``<partition>/<offset>``, Redis' ``<stream>/<ms>-<seq>``,
the socket's line number. Offsets are ordered as text in which every run of ASCII digits is read
as a number: left-padded with zeros to 20 digits (a longer run is kept as it is), ties broken by
the offset itself, a missing offset last. So within one file, partition or stream the earlier
row comes first; across them the order is fixed and arbitrary (``a.json:*`` before ``b.json:*``,
partition 0 before partition 1). ``offset_rank`` (Python) and ``offset_order_column`` (Spark)
give the same order.
"""

from __future__ import annotations

import re

from pyspark.sql import Column
from pyspark.sql import functions as F

#: digits a run of digits is padded to
DIGITS = 20
_RUN = re.compile(r"[0-9]+")


def offset_order(offset: str) -> str:
    """The text an offset is ordered by: every run of digits left-padded to 20 digits.

    >>> offset_order("f.json:9") < offset_order("f.json:10"), offset_order("s/1700000000000-12")
    (True, 's/00000001700000000000-00000000000000000012')
    """
    return _RUN.sub(lambda m: m.group().zfill(DIGITS), offset)


def offset_rank(offset: str | None) -> tuple[bool, str, str]:
    """What to sort offsets by in Python: a missing one last, then ``offset_order``, then the offset.

    >>> sorted(["p/10", None, "p/9"], key=offset_rank)
    ['p/9', 'p/10', None]
    """
    if not isinstance(offset, str):  # None (or pandas' NaN)
        return (True, "", "")
    return (False, offset_order(offset), offset)


def offset_order_column(offset: Column) -> Column:
    """``offset_order`` as a Spark expression; sort by it, then by the offset, nulls last.

    >>> df.orderBy(offset_order_column(F.col("offset")).asc_nulls_last(), F.col("offset"))  # doctest: +SKIP
    """
    runs = F.regexp_extract_all(offset, F.lit("([0-9]+|[^0-9]+)"), 1)
    padded = F.transform(runs, lambda t: F.when(t.rlike("^[0-9]") & (F.length(t) < DIGITS),
                                                F.lpad(t, DIGITS, "0")).otherwise(t))
    return F.array_join(padded, "")
