"""Building what a run's queries write: source -> decode -> pipeline, for one output or several at once.

``build_outputs`` reads and decodes each source once for all the outputs it is given (the job's
shared query builds its outputs so); ``build_output`` is one output, as a stream or, with
``batch=True``, the same functions over a static read (tests and backfills recompute so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from speedlayer.core.spark_errors import raise_if_interrupted
from speedlayer.decode.observation import OBSERVATION, latency_sample
from speedlayer.decode.validate import decode
from speedlayer.runtime.plan import RunPlan
from speedlayer.sources.base import Source


def build_output(spark, plan: RunPlan, output: str, batch: bool = False):
    """The DataFrame of one output: a stream, or with ``batch=True`` the same function on a static read."""
    return build_outputs(spark, plan, [output], batch)[output]


def build_outputs(spark, plan: RunPlan, outputs: list[str], batch: bool = False) -> dict[str, Any]:
    """The DataFrames of several outputs, by name, from one read and decode of each source they need."""
    max_events = plan.settings.max_events

    def read(source: Source):
        return source.read_batch(spark, max_events) if batch else source.read_stream(spark, max_events)

    specs = {name: plan.job.outputs[name] for name in outputs}
    # a second stream is read with the same --max-events bound as the main one
    inputs = {name: decode(read(plan.inputs[name]), plan.job.inputs[name])
              for name in dict.fromkeys(i for spec in specs.values() for i in spec.inputs)}
    frames = {name: inputs[spec.dead_letters_of].dead_letters for name, spec in specs.items() if spec.dead_letters_of}
    if len(frames) == len(specs):
        return frames
    raw = read(plan.source)
    # Latency and dead-letter counts come from an observation (see runtime/metrics.py) that Spark
    # computes inside each micro-batch; continuous and real-time mode have no such batches.
    observed = not batch and not (plan.trigger.continuous or plan.trigger.realtime)
    interval_ms = plan.trigger.interval_ms if plan.trigger.kind == "processing" else 0
    decoded = plan.job.decode(raw, observe=OBSERVATION if observed else None,
                              latency_sample=latency_sample(plan.source.batch_rows(interval_ms)))
    results = plan.job.pipeline(decoded.events, plan.params, **inputs)
    for name, spec in specs.items():
        if name not in frames:
            frames[name] = _output_frame(name, spec, decoded.dead_letters, results, 0 if batch else None)
    return {name: frames[name] for name in outputs}


def batch_outputs(plan: RunPlan, events, outputs: list[str], batch_id: int) -> dict[str, Any]:
    """The named outputs of one static batch of the main source's decoded ``events``, as the run
    computes them: the job's pipeline, then each output's per-batch step.

    Only outputs of the main stream's events: not one that joins a second input (it needs that
    input's stream), nor the dead letters (the decoder's, not the events').

    >>> frames = batch_outputs(plan, events_batch, ["batch-counts"], 7)  # doctest: +SKIP
    """
    specs = {name: plan.job.outputs[name] for name in outputs}
    refused = [name for name, spec in specs.items() if spec.inputs or spec.dead_letters_of or name == "dead-letters"]
    if refused:
        raise ValueError(f"outputs {refused} are not computed from the main source's events alone")
    if not specs:
        return {}
    results = plan.job.pipeline(events, plan.params)
    return {name: _output_frame(name, spec, None, results, batch_id) for name, spec in specs.items()}


def _output_frame(name: str, spec, dead_letters, results, batch_id: int | None):
    """An output's frame from the pipeline's results (the decoder's ``dead_letters`` for that output);
    its per-batch step applied for a static batch (``batch_id``; a stream's is applied by its writer)."""
    df = dead_letters if name == "dead-letters" else results[name]
    return spec.per_batch(df, batch_id) if batch_id is not None and spec.per_batch is not None else df


def writing_per_batch(write: Callable[[Any, int], None], per_batch: Callable[[Any, int], Any]) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function that hands ``write`` the output computed from each batch, ``per_batch(batch, batch_id)``.

    >>> writing_per_batch(lambda rows, batch_id: print(rows, batch_id), lambda b, i: b * 2)(21, 0)
    42 0
    """
    def each_batch(batch: Any, batch_id: int) -> None:
        try:
            rows = per_batch(batch, batch_id)
        except Exception as exc:
            raise_if_interrupted(exc)  # a Spark job the step ran, cut by the query's stop
            raise
        write(rows, batch_id)

    return each_batch


class PerBatchWriter:
    """A stream writer whose ``foreachBatch`` function receives ``per_batch(batch, batch_id)`` instead of the batch.

    Sinks that write through ``foreachBatch`` (console, databases, Redis) take it unchanged.
    """

    def __init__(self, writer, per_batch: Callable[[Any, int], Any]):
        self._writer, self._per_batch = writer, per_batch

    def foreachBatch(self, write: Callable[[Any, int], None]):
        return self._writer.foreachBatch(writing_per_batch(write, self._per_batch))

    def __getattr__(self, name: str):
        return getattr(self._writer, name)


def per_batch_schema_frame(spark, df, per_batch):
    """An empty static DataFrame with the columns ``per_batch`` gives (sinks create tables from it)."""
    return per_batch(spark.createDataFrame([], df.schema), 0)
