"""A run's views for ad-hoc SQL (``speedlayer sql``, the dashboard's SQL box), and read-only queries over them.

The views of a run, from its ``--state-dir``:

- each output whose sink can be read back (Parquet, Delta): the rows it has committed, by the
  output's name (``windows``, ``dead_letters``);
- each stateful query's state, read with Spark's state data source: ``<query>_state``, or
  ``<query>_state_<part>`` where a query keeps several (``dedup``, ``aggregation``, ``sessions``,
  a join's ``left`` and ``right``, a state processor's variables by name);
- the job's static tables (the fleet's ``zones``, the fraud job's ``profiles``).

>>> views = define_views(spark, Path("state/fleet"))          # doctest: +SKIP
>>> query(spark, "SELECT count(*) FROM windows", limit=100)    # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import re
import threading
import uuid
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from speedlayer.core.errors import ConfigError
from speedlayer.core.spark_errors import quiet_analysis_errors, spark_reason
from speedlayer.core.tables import TableRef, sql_name
from speedlayer.monitor.status import find_checkpoints
from speedlayer.runtime.manifest import MANIFEST

#: the first word of a statement that only reads
READS = frozenset({"select", "with", "values", "table", "from", "show", "describe", "desc", "explain"})
#: the statements that read, as the refusals name them
STARTS = "SELECT, WITH, VALUES, TABLE, FROM, SHOW, DESCRIBE or EXPLAIN"
#: words that write, drop, change the session or call into the JVM, refused anywhere in a statement
WRITES = frozenset({
    "insert", "create", "drop", "alter", "delete", "update", "merge", "truncate", "overwrite", "set", "reset",
    "add", "refresh", "cache", "uncache", "load", "msck", "repair", "use", "grant", "revoke", "analyze", "call",
    "execute", "declare", "reflect", "java_method", "try_reflect",
})

NOT_FOUND_HINT = (" (SHOW VIEWS lists the run's views: the outputs written to parquet: or delta:, a memory output "
                  "while its job runs; an output written to a database is asked there)")
#: a state operator's part of a view name, by Spark's operator name
_STATE_PARTS = {"dedupeWithinWatermark": "dedup", "dedupe": "dedup", "stateStoreSave": "aggregation",
                "sessionWindowStateStoreSaveExec": "sessions"}


@dataclass(frozen=True)
class View:
    name: str
    #: what it holds, in a few words
    what: str


def _words_and_statements(sql: str) -> tuple[list[str], int]:
    """The bare words of ``sql`` (outside strings, quoted names and comments) and its number of statements."""
    words: list[str] = []
    statements, has_text, i, n = 0, False, 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"`":
            end = i + 1
            while end < n and sql[end] != c:
                end += 2 if sql[end] == "\\" and c != "`" else 1
            i, has_text = end + 1, True
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c == ";":
            statements, has_text, i = statements + has_text, False, i + 1
        elif c.isalpha() or c == "_":
            end = i
            while end < n and (sql[end].isalnum() or sql[end] == "_"):
                end += 1
            words.append(sql[i:end])
            i, has_text = end, True
        else:
            has_text = has_text or not c.isspace()
            i += 1
    return words, statements + has_text


def check_read_only(sql: str) -> str:
    """``sql`` without a trailing ``;`` when it is one statement that only reads; else a ConfigError saying why.

    >>> check_read_only("SELECT * FROM windows;")
    'SELECT * FROM windows'
    >>> check_read_only("DROP TABLE windows")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    speedlayer.core.errors.ConfigError: speedlayer sql only reads: a statement starts with SELECT, ..., not DROP
    """
    words, statements = _words_and_statements(sql)
    if statements == 0:
        raise ConfigError("no SQL given: e.g. SELECT * FROM windows LIMIT 10")
    if statements > 1:
        raise ConfigError("one statement at a time: give the queries one by one")
    if not words or words[0].lower() not in READS:
        first = words[0] if words else sql.strip()[:20]
        raise ConfigError(f"speedlayer sql only reads: a statement starts with {STARTS}, not {first}")
    refused = next((w for w in words if w.lower() in WRITES), None)
    if refused:
        raise ConfigError(f"speedlayer sql only reads: {refused.upper()} is refused (a column of that name: write it "
                          "in backquotes)")
    return sql.strip().rstrip(";").strip()


def recorded_tables(state_dir: Path) -> dict[str, TableRef]:
    """The tables a run recorded in its manifest (outputs read back, static tables), by view name."""
    manifest = state_dir / MANIFEST
    if not state_dir.is_dir():
        raise ConfigError(f"{state_dir} does not exist: give the --state-dir the run was started with")
    if not manifest.is_file():
        raise ConfigError(f"{state_dir} holds no run (no {MANIFEST} in it): give the --state-dir the run was started "
                          "with")
    try:
        tables = json.loads(manifest.read_text()).get("tables") or {}
        return {name: TableRef.from_record(record) for name, record in tables.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(f"{manifest} is damaged: run the job again on this --state-dir to write it anew") from None


#: per checkpoint path: (its metadata files' names and times, the readers' options)
_READERS: dict[str, tuple[tuple, dict[str, dict[str, str]]]] = {}


def _state_part(operator: dict[str, Any], variable: str | None) -> str:
    return variable or _STATE_PARTS.get(operator.get("operatorName", ""), f"operator{operator.get('operatorId')}")


def _state_readers(spark: Any, checkpoint: Path) -> dict[str, dict[str, str]]:
    """Per part of a checkpoint's state, the state data source's options that read it; read again only
    when the operators' metadata files change (a restart with another query), not at every statement."""
    signature = tuple(sorted((str(f), f.stat().st_mtime_ns) for f in checkpoint.glob("state/*/_metadata/**/*")
                             if f.is_file()))
    known = _READERS.get(str(checkpoint))
    if known is None or known[0] != signature:
        _READERS[str(checkpoint)] = (signature, _read_state_parts(spark, checkpoint))
    return _READERS[str(checkpoint)][1]


def _read_state_parts(spark: Any, checkpoint: Path) -> dict[str, dict[str, str]]:
    parts: dict[str, dict[str, str]] = {}
    for row in spark.read.format("state-metadata").load(str(checkpoint)).collect():
        operator = row.asDict()
        options = {"operatorId": str(operator["operatorId"])}
        if operator.get("operatorName") == "symmetricHashJoin":
            for side in ("left", "right"):
                parts[side] = {**options, "joinSide": side}
            continue
        props = json.loads(operator.get("operatorProperties") or "{}")
        variables = [v.get("stateName") for v in props.get("stateVariables", []) if v.get("stateName")]
        if variables:
            for variable in variables:
                parts[_state_part(operator, variable)] = {**options, "stateVarName": variable}
        elif operator.get("stateStoreName") in (None, "default"):
            parts[_state_part(operator, None)] = options
    return parts


def define_views(spark: Any, state_dir: Path) -> list[View]:
    """Register every view of the run in ``state_dir`` as a temporary view of ``spark``; what was registered.

    A table that cannot be read (a directory a run has not written yet) is left out.
    """
    views: list[View] = []
    for name, table in recorded_tables(state_dir).items():
        try:
            table.read(spark).createOrReplaceTempView(name)
        except Exception:  # noqa: BLE001 — nothing committed there yet: no view, the others still show
            continue
        views.append(View(name, f"{table.format} {table.path}"))
    shared = spark.conf.get("spark.sql.globalTempDatabase", "global_temp")
    for table in spark.catalog.listTables(shared):  # a running job's memory outputs (local views are listed too)
        if table.database == shared and table.name not in {v.name for v in views}:
            spark.table(f"{shared}.{table.name}").createOrReplaceTempView(table.name)
            views.append(View(table.name, "rows in the running job's memory"))
    _ = spark.streams.active  # Spark's state store coordinator, which loading a snapshot calls, starts with this
    for checkpoint in find_checkpoints(state_dir):
        if not checkpoint.stateful or checkpoint.last_committed is None or checkpoint.path.parent.name != "checkpoints":
            continue
        query = sql_name(checkpoint.path.name)
        parts = _state_readers(spark, checkpoint.path)
        for part, options in parts.items():
            name = f"{query}_state" if len(parts) == 1 else f"{query}_state_{sql_name(part)}"
            state = spark.read.format("statestore").options(**options).load(str(checkpoint.path))
            unique_fields(state).createOrReplaceTempView(name)
            views.append(View(name, f"state of query {checkpoint.path.name} ({part}) at its last committed batch"))
    return views


@dataclass
class Answer:
    columns: list[str]
    rows: list[tuple]
    #: whether rows past ``limit`` were left out
    truncated: bool

    def records(self) -> list[dict[str, Any]]:
        """The rows as JSON-ready dicts: nested rows as dicts, times as ISO-8601 text, decimals as numbers.

        >>> Answer(["n", "at"], [(1, datetime(2026, 1, 1))], False).records()
        [{'n': 1, 'at': '2026-01-01T00:00:00'}]
        """
        return [{c: plain(v) for c, v in zip(self.columns, row)} for row in self.rows]


def plain(value: Any) -> Any:
    """A value of a collected row as JSON has it (``Answer.records``)."""
    if hasattr(value, "asDict"):
        return {k: plain(v) for k, v in value.asDict().items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def query(spark: Any, sql: str, limit: int = 1000, timeout_s: float = 60.0) -> Answer:
    """Run one read-only statement: at most ``limit`` rows, interrupted after ``timeout_s`` seconds.

    >>> query(spark, "SELECT vehicle_id, max(max_speed) FROM windows GROUP BY 1", limit=10).rows  # doctest: +SKIP
    """
    statement = check_read_only(sql)
    tag = f"speedlayer-sql-{uuid.uuid4().hex}"
    timed_out = threading.Event()

    def interrupt() -> None:
        timed_out.set()
        spark.interruptTag(tag)

    spark.addTag(tag)
    timer = threading.Timer(timeout_s, interrupt)
    timer.start()
    try:
        with quiet_analysis_errors():
            df = spark.sql(statement)
            rows = [tuple(r) for r in df.limit(limit + 1).collect()]
            columns = list(df.columns)
    except Exception as exc:  # noqa: BLE001 — Spark's errors are the user's query's: one line
        if timed_out.is_set():
            raise ConfigError(f"the query ran past {timeout_s:g} s and was stopped: narrow it, or give a longer "
                              "--timeout") from None
        raise ConfigError(_failure(spark_reason(exc))) from None
    finally:
        timer.cancel()
        spark.removeTag(tag)
    return Answer(columns, rows[:limit], len(rows) > limit)


def _failure(reason: str) -> str:
    """The one line for a statement Spark refused; a name with ``-`` (an output's, not a view's) gets the view's."""
    if "TABLE_OR_VIEW_NOT_FOUND" in reason or "INVALID_IDENTIFIER" in reason:
        dashed = re.search(r"(?:identifier |`)(\w+(?:-\w+)+)", reason)
        if dashed:  # Spark's own advice, to back-quote it, finds no view either
            name = dashed.group(1)
            return (f"the query failed: there is no view {name}: a view is named after its output with _ for -, "
                    f"{sql_name(name)}{NOT_FOUND_HINT}")
    return f"the query failed: {reason}{NOT_FOUND_HINT if 'TABLE_OR_VIEW_NOT_FOUND' in reason else ''}"


class SqlBox:
    """The dashboard's SQL box: a session of the running job's own, the views defined anew for each
    statement (so each reads what is committed then), one statement at a time.

    >>> SqlBox(run.spark, run.plan.state_dir).ask("SELECT count(*) AS n FROM windows")  # doctest: +SKIP
    {'columns': ['n'], 'rows': [{'n': 1665}], 'truncated': False}
    """

    def __init__(self, spark: Any, state_dir: Path, limit: int = 500, timeout_s: float = 30.0):
        self.spark, self.state_dir, self.limit, self.timeout_s = spark.newSession(), state_dir, limit, timeout_s
        self._lock = threading.Lock()

    def ask(self, sql: str) -> dict[str, Any]:
        check_read_only(sql)
        with self._lock:
            define_views(self.spark, self.state_dir)
            answer = query(self.spark, sql, self.limit, self.timeout_s)
        return {"columns": answer.columns, "rows": answer.records(), "truncated": answer.truncated, "limit": self.limit}


def unique_fields(df: Any) -> Any:
    """``df`` with each struct column's repeated field names made unique (``count``, ``count_2``): an
    aggregation's state holds one ``count`` and one ``sum`` per function, which SQL cannot tell apart."""
    from pyspark.sql import types as T

    columns = []
    for field in df.schema.fields:
        kind = field.dataType
        names = [f.name for f in kind.fields] if isinstance(kind, T.StructType) else []
        if len(set(names)) == len(names):
            columns.append(df[field.name])
            continue
        seen: dict[str, int] = {}
        renamed = []
        for f in kind.fields:
            seen[f.name] = seen.get(f.name, 0) + 1
            renamed.append(T.StructField(f.name if seen[f.name] == 1 else f"{f.name}_{seen[f.name]}", f.dataType))
        columns.append(df[field.name].cast(T.StructType(renamed)).alias(field.name))
    return df.select(*columns)
