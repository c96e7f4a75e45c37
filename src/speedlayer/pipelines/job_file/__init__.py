"""Job files: a job without Python, as YAML: the events' schema, the watermark and dedup key, and each
output as Spark SQL over the view ``events`` (see docs/job-files.md).

    speedlayer run --job-file orders.yaml --source files:///landing/orders --sink revenue=parquet:out/revenue

The pipeline decodes (dead letters out), sets the watermark on the time field, drops re-sent
events by the dedup key, registers what is left as the view ``events`` and runs each selected
output's SQL. Whether an output keeps state is found from its query's plan before start
(``speedlayer.runtime.streamable``), where Spark's own checks of its mode run too.

>>> job = load_job_file("orders.yaml")  # doctest: +SKIP
>>> list(job.outputs)                   # doctest: +SKIP
['revenue', 'big-orders', 'dead-letters']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cache, partial
from pathlib import Path

from pyspark.sql import DataFrame

from speedlayer.core.schemas import EventSchema, Field
from speedlayer.pipelines.base import DEAD_LETTERS, LATE, Job, LazyOutputs, Output, Params
from speedlayer.pipelines.dedup import drop_duplicates
from speedlayer.pipelines.job_file.reading import read_spec
from speedlayer.pipelines.job_file.references import ReferenceSpec
from speedlayer.pipelines.job_file.spec import JobFileSpec, OutputSpec
from speedlayer.pipelines.job_file.sql import VIEW, output_query
from speedlayer.pipelines.job_file.tables import check_tables, read_tables, shared_table_paths, sql_tables, variables_model
from speedlayer.pipelines.late import late_events
from speedlayer.pipelines.ops import with_watermark

__all__ = ["VIEW", "load_job_file", "job_from_spec"]


def load_job_file(path: str | Path) -> Job:
    """The job a job file defines; a ConfigError in one line naming the file and the key otherwise.

    >>> load_job_file("orders.yaml").default_outputs  # doctest: +SKIP
    ('revenue',)
    """
    return job_from_spec(read_spec(Path(path)), str(path))


def job_from_spec(spec: JobFileSpec, file: str) -> Job:
    """The Job of a validated job file; ``file`` is named in refusals of its outputs' SQL."""
    schema = EventSchema(
        name=spec.schema_.name or spec.name,
        fields=tuple(Field(f.name, f.type, f.min, f.max, tuple(f.allowed) if f.allowed else None, f.required)
                     for f in spec.schema_.fields),
        time_field=spec.schema_.time_field,
    )
    outputs: dict[str, Output] = {name: _output(name, o, file) for name, o in spec.outputs.items()}
    outputs["dead-letters"] = DEAD_LETTERS
    if spec.dedup_key:
        outputs["late"] = LATE
    pipeline = partial(job_file_pipeline, time_field=schema.time_field, dedup_key=spec.key,
                       queries={name: (o.sql, tuple(o.key)) for name, o in spec.outputs.items()}, file=file,
                       references=spec.references)
    tables = {"references": spec.references, "file": file}
    job = Job(
        name=spec.name,
        summary=spec.summary or f"job file {file}",
        schema=schema,
        pipeline=pipeline,
        outputs=outputs,
        default_outputs=tuple(spec.default_outputs if spec.default_outputs is not None else spec.outputs),
        default_source=spec.default_source or "",
        defaults=spec.defaults.settings(),
        definition=spec.digest(),
        dedup_key=spec.key,
        options=variables_model(spec.variables),
        check=partial(check_tables, **tables) if spec.references else None,
        shared_paths=partial(shared_table_paths, **tables) if spec.references else None,
        tables=partial(sql_tables, **tables) if spec.references else None,
    )
    # the late output reads the job's schema and dedup key, so the pipeline gets the job itself
    return dataclasses.replace(job, pipeline=partial(pipeline, job=job)) if spec.dedup_key else job


def _output(name: str, spec: OutputSpec, file: str) -> Output:
    summary = spec.summary or " ".join(spec.sql.split())[:80]
    return Output(name, summary, tuple(spec.modes), spec.mode, stateful=None, key=tuple(spec.key), defined_in=file)


def job_file_pipeline(events: DataFrame, params: Params, *, time_field: str, dedup_key: str | tuple[str, ...] | None,
                      queries: Mapping[str, tuple[str, tuple[str, ...]]], file: str,
                      references: Mapping[str, ReferenceSpec] | None = None,
                      job: Job | None = None) -> Mapping[str, DataFrame]:
    """Each output's SQL over the events, watermarked on ``time_field``, re-sent copies dropped by ``dedup_key``,
    and over the reference tables by their names; with a dedup key, ``late``: the events behind the
    watermark (``speedlayer.pipelines.late``) of ``job``.

    Every output is built only when asked for (``LazyOutputs``): a run builds the ones it writes,
    and reads the tables (once) when the first of them is built.
    The view ``events`` holds the schema's fields only (not ``ingest_time`` nor the source offset,
    in which copies of a re-sent event differ).
    """
    fields = [c for c in events.columns if c not in ("ingest_time", "offset")]
    watermarked = with_watermark(events, params, time_field)
    kept = drop_duplicates(watermarked, params, dedup_key) if dedup_key else watermarked
    view = kept.select(*fields)
    tables = cache(partial(read_tables, events.sparkSession, references or {}, params, file))
    builders = {name: lambda name=name, sql=sql, key=key: output_query(view, name, sql, key, file, tables())
                for name, (sql, key) in queries.items()}
    if job is not None:
        builders["late"] = partial(late_events, watermarked, job, params)
    return LazyOutputs(builders)
