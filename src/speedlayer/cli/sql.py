"""``speedlayer sql``: ad-hoc, read-only SQL over a run's outputs, state and static tables.

    speedlayer sql --state-dir state/fleet "SELECT vehicle_id, max(max_speed) FROM windows GROUP BY 1"
    speedlayer sql --state-dir state/fleet --format csv "SELECT * FROM alerts" > alerts.csv
    speedlayer sql --state-dir state/fleet          # a prompt: one statement per ';' or blank line
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import typer

from speedlayer.cli.console import err, out
from speedlayer.core.errors import ConfigError

FORMATS = ("table", "csv", "json")
PROMPT_HELP = "one statement per ';' or blank line; \\d lists the views, \\q or Ctrl-D leaves"


def sql_command(
    statement: str = typer.Argument(None, help="one read-only statement (SELECT, WITH, SHOW, DESCRIBE, EXPLAIN); "
                                               "none: a prompt"),
    state_dir: str = typer.Option(..., "--state-dir", help="the --state-dir of a run, running or stopped"),
    fmt: str = typer.Option("table", "--format", help="table, csv, or json (one object a line)"),
    limit: int = typer.Option(1000, "--limit", min=1, help="rows shown at most"),
    timeout: float = typer.Option(60.0, "--timeout", min=0.1, help="seconds a statement may run before it is stopped"),
) -> None:
    """Ad-hoc SQL over a run's views: each output's committed rows (Parquet, Delta), each stateful query's
    state, the job's static tables. Read-only: anything that writes or drops is refused."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown --format {fmt!r}: use table, csv or json")
    from speedlayer.monitor.sql_views import check_read_only, define_views, query, recorded_tables

    folder = Path(state_dir)
    if statement is not None:
        check_read_only(statement)  # before Spark starts
    tables = recorded_tables(folder)
    spark, owned = _session(folder, tables.values())
    try:
        views = define_views(spark, folder)
        if statement is not None:
            _print(query(spark, statement, limit, timeout), fmt, limit)
            return
        err.print(f"{len(views)} views: {', '.join(v.name for v in views) or 'none yet'} ({PROMPT_HELP})")
        for text in _statements():
            if text in ("\\d", ".views"):
                for view in views:
                    out.print(f"{view.name}: {view.what}", soft_wrap=True, markup=False)
                continue
            try:
                check_read_only(text)
                views = define_views(spark, folder)  # anew: each statement reads what is committed now
                _print(query(spark, text, limit, timeout), fmt, limit)
            except ConfigError as exc:
                err.print(f"error: {exc}", soft_wrap=True, markup=False)
    finally:
        if owned:
            _stop(spark)


def _session(folder: Path, tables) -> tuple[Any, bool]:
    """(session, whether this command owns it): a Spark Connect session of the run alive in ``folder``;
    without one, a session of its own beside one already running in this process, else a local Spark
    with what the recorded tables' readers need (Delta's package and settings)."""
    from pyspark.sql import SparkSession

    from speedlayer.runtime.session import tool_session
    from speedlayer.runtime.sql_endpoint import connect, recorded_endpoint

    endpoint = recorded_endpoint(folder)
    if endpoint is not None:
        err.print(f"asking the running job ({endpoint['url']})")
        return connect(endpoint), True
    active = SparkSession.getActiveSession()
    if active is not None:  # Python's own caller (a notebook, a test): its temporary views stay its own
        return active.newSession(), False
    packages = list(dict.fromkeys(p for t in tables for p in t.packages))
    conf = {k: v for t in tables for k, v in t.conf.items()}
    return tool_session("sql", cores=2, packages=packages, connector_conf=conf), True


def _stop(spark: Any) -> None:
    """Stop a session this command made, waiting 10 s at most: releasing a Spark Connect session whose job
    has just stopped retries for minutes, and nothing is lost by leaving it."""
    import threading

    closer = threading.Thread(target=spark.stop, name="speedlayer-sql-stop", daemon=True)
    closer.start()
    closer.join(10)


def _statements():
    """Statements typed at the prompt, until ``\\q`` or the end of input."""
    lines: list[str] = []
    while True:
        try:
            line = input("sql> " if not lines else "...> ")
        except (EOFError, KeyboardInterrupt):
            err.print("")
            return
        stripped = line.strip()
        if not lines and stripped in ("\\q", "exit", "quit"):
            return
        if not lines and stripped in ("\\d", ".views"):
            yield stripped
            continue
        if stripped:
            lines.append(line)
        if lines and (not stripped or stripped.endswith(";")):
            yield "\n".join(lines)
            lines = []


def _print(answer, fmt: str, limit: int) -> None:
    if fmt == "json":
        for record in answer.records():
            sys.stdout.write(json.dumps(record, default=str) + "\n")
    else:
        cells = [[_cell(v) for v in record.values()] for record in answer.records()]
        if fmt == "csv":
            writer = csv.writer(sys.stdout)
            writer.writerow(answer.columns)
            writer.writerows(cells)
        else:
            from rich.table import Table

            table = Table(*answer.columns, show_lines=False)
            for row in cells:
                table.add_row(*row)
            out.print(table)
    sys.stdout.flush()
    more = f"; more left out: --limit {limit} shows at most {limit}" if answer.truncated else ""
    err.print(f"({len(answer.rows)} row{'s' if len(answer.rows) != 1 else ''}{more})")


def _cell(value: Any) -> str:
    """A JSON-ready value as a table or CSV cell: nested values as JSON, null as empty."""
    if value is None:
        return ""
    return json.dumps(value, default=str) if isinstance(value, (dict, list)) else str(value)
