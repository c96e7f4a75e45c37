"""The job's shared query (``--one-query``): several outputs written by one streaming query.

Each output is otherwise a query of its own, which reads the source and decodes every event
again. In the shared query the outputs' rows travel side by side: each output's rows sit in a
struct column of their own (the others' are nulls), the outputs are unioned, and one
``foreachBatch`` function keeps the micro-batch once and hands each sink its output's rows. All
outputs see one batch, one watermark and one timeline; the branches that follow the dedup share
one read and decode of the source (dead letters and late events, which leave before it, read it
again within the same batch).

An output joins the shared query when its rows are appended, its sink writes micro-batches
(``Sink.has_batch_function``) and it reads only the main stream, even when it is the only one: what
``--one-query`` selects does not depend on what else runs. The others keep queries of their own.
The shared query's checkpoint records which outputs it writes: a resume that would change them
is refused, since the checkpoint's state belongs to that set.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from speedlayer.core.errors import ConfigError
from speedlayer.core.modes import APPEND
from speedlayer.runtime.checkpoints import told_when_full
from speedlayer.runtime.triggers import Trigger

#: the shared query's checkpoint folder, beside the outputs' own (``checkpoints/<output>``)
SHARED_CHECKPOINT = "_shared"
#: the file in the shared checkpoint that names the outputs it writes
OUTPUTS_FILE = "speedlayer-outputs.json"
#: the union's column that names the output a row belongs to
OUTPUT_COLUMN = "_output"


def shared_query_name(job: str) -> str:
    """The shared query's name (its progress, the summary and the Spark UI show it).

    >>> shared_query_name("fleet")
    'fleet_shared'
    """
    return f"{job}_shared"


def joins_shared(query: Any) -> str | None:
    """Why a planned output (a ``QueryPlan``) keeps a query of its own, or None when it joins the shared one."""
    if query.mode != APPEND:
        return f"{query.mode} mode"
    if not query.sink.has_batch_function:
        return f"sink {query.sink.scheme}: starts a query of its own"
    if query.output.inputs or query.output.dead_letters_of:
        return "it reads a second stream"
    return None


def share_queries(job: str, queries: list[Any], trigger: Trigger, state_dir: Path) -> tuple[list[Any], list[str]]:
    """The planned queries with every output that can share the job's query in it (their name and
    checkpoint become the shared query's), and the notes a user reads before the run: which outputs
    share it, which keep queries of their own, and why."""
    if trigger.continuous or trigger.realtime:
        raise ConfigError(f"--one-query runs a micro-batch query (foreachBatch), which {trigger.kind} mode cannot: "
                          "drop --one-query, or use a micro-batch trigger such as processing:1s")
    alone = {q.output.name: why for q in queries if (why := joins_shared(q)) is not None}
    joining = [q for q in queries if q.output.name not in alone]
    checkpoint = state_dir / "checkpoints" / SHARED_CHECKPOINT
    planned = [q if q.output.name in alone else replace(q, shared=True, name=shared_query_name(job), checkpoint=checkpoint)
               for q in queries]
    notes = [f"--one-query: {', '.join(q.output.name for q in joining)} share one query, {shared_query_name(job)}"
             if joining else "--one-query: no output can share a query"]
    if alone:
        own = "keeps a query of its own" if len(alone) == 1 else "keep queries of their own"
        notes.append(f"--one-query: {', '.join(alone)} {own} ({'; '.join(f'{n}: {why}' for n, why in alone.items())})")
    return planned, notes


def main_readers(queries: list[Any]) -> list[str]:
    """The queries that read the main source, each by an output's name (the shared query by its own).

    >>> main_readers(plan.queries)  # doctest: +SKIP
    ['fleet_shared', 'sliding']
    """
    return list(dict.fromkeys(q.name if q.shared else q.output.name for q in queries if not q.output.dead_letters_of))


def check_shared_checkpoint(queries: list[Any], state_dir: Path) -> None:
    """Refuse a resume that would move outputs in or out of the shared query; record its outputs."""
    shared = [q for q in queries if q.shared]
    for query in shared:
        own = state_dir / "checkpoints" / query.output.name
        if (own / "offsets").is_dir():
            raise ConfigError(f"output {query.output.name!r} was written by a query of its own in {state_dir}: "
                              "resume it without --one-query, or start a new --state-dir")
    folder = state_dir / "checkpoints" / SHARED_CHECKPOINT
    recorded = recorded_outputs(folder)
    names = sorted(q.output.name for q in shared)
    if recorded is not None and (folder / "offsets").is_dir() and recorded != names:
        now = ", ".join(names) or "none"
        raise ConfigError(f"the shared query in {state_dir} wrote outputs {', '.join(recorded)}; this run would share "
                          f"{now}: select the same outputs with --one-query, or start a new --state-dir")
    if shared and recorded != names:
        with told_when_full(state_dir):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / OUTPUTS_FILE).write_text(json.dumps(names))


def recorded_outputs(folder: Path) -> list[str] | None:
    """The outputs a shared query's checkpoint folder says it writes (None: not one, or not recorded)."""
    try:
        return sorted(json.loads((folder / OUTPUTS_FILE).read_text()))
    except (OSError, ValueError):
        return None


def check_shareable(df: Any, output: Any) -> None:
    """Refuse, naming the output, one whose stateful operation feeds another (an aggregation of an
    aggregation): Spark runs it only with a watermark per operator, which the shared query does not give."""
    from speedlayer.runtime.streamable import state_fed_by_state

    feeding = state_fed_by_state(df)
    if feeding is not None:
        raise ConfigError(f"output {output.name!r} cannot share the job's query: its {feeding} feeds another stateful "
                          f"operation, which needs a watermark of its own: run without --one-query, or write "
                          f"{output.name} to a sink that starts a query of its own (parquet:)")


def pack_outputs(frames: dict[str, Any]) -> Any:
    """One streaming DataFrame holding every output's rows: column ``o<i>`` is output ``i``'s row as
    a struct (null in the other outputs' rows) and ``_output`` names the output.

    >>> pack_outputs({"windows": windows_df, "alerts": alerts_df}).columns  # doctest: +SKIP
    ['_output', 'o0', 'o1']
    """
    from pyspark.sql import functions as F

    columns = {name: f"o{i}" for i, name in enumerate(frames)}
    union = None
    for name, frame in frames.items():
        packed = [F.struct(*[F.col(f"`{c}`") for c in frame.columns]).alias(columns[name]) if other == name
                  else F.lit(None).cast(frames[other].schema).alias(columns[other]) for other in frames]
        rows = frame.select(F.lit(name).alias(OUTPUT_COLUMN), *packed)
        union = rows if union is None else union.unionByName(rows)
    return union


#: what the shared query is planned with (a query keeps the settings it started with). Spark lets a
#: branch read another branch's shuffle of the same rows (``ReusedExchange``: one read, decode and
#: ordering pass for the branches that share it), but then works out each stateful operator's
#: watermark from the nodes below it, and a reused shuffle hides the watermark's node: that
#: branch's state would never be evicted, its timers never fire. With this setting every stateful
#: operator takes the query's one watermark (Spark's rule before 3.5), which is the same value for
#: every branch of the shared query, since they all watermark the same events the same way.
SHARED_QUERY_CONF = {"spark.sql.streaming.statefulOperator.allowMultiple": "false"}


@contextmanager
def session_conf(spark: Any, conf: dict[str, str]) -> Iterator[None]:
    """Within: the session's SQL settings changed as ``conf`` says; restored after.

    >>> with session_conf(spark, SHARED_QUERY_CONF):  # doctest: +SKIP
    ...     query = writer.start()
    """
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


class FanOut:
    """The shared query's ``foreachBatch`` function: the batch is kept once (persisted), then each
    output's rows go to that output's own batch function, in the order the outputs were given.

    >>> query = packed.writeStream.foreachBatch(FanOut({"windows": write_windows})).start()  # doctest: +SKIP
    """

    def __init__(self, writers: dict[str, Callable[[Any, int], None]]):
        self.writers = writers

    def __call__(self, batch: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        batch.persist()
        try:
            for i, (name, write) in enumerate(self.writers.items()):
                write(batch.where(F.col(OUTPUT_COLUMN) == name).select(f"o{i}.*"), batch_id)
        finally:
            batch.unpersist()
