"""What ``speedlayer jobs NAME`` prints about one job: where it comes from, its events, outputs and options."""

from __future__ import annotations

from typing import Any

from speedlayer.pipelines.base import Job

_MISSING = ("PydanticUndefined", "Ellipsis")


def _field_line(field: Any) -> str:
    """One event field: name, kind and the values a valid event has."""
    limits = ""
    if field.choices:
        limits = f"one of {', '.join(field.choices)}"
    elif field.min is not None or field.max is not None:
        low = "" if field.min is None else _number(field.min)
        high = "" if field.max is None else _number(field.max)
        limits = f"{low} to {high}" if low and high else (f"at least {low}" if low else f"at most {high}")
    return f"    {field.name:<20} {field.kind:<10} {limits}".rstrip()


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _type_name(annotation: Any) -> str:
    return annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")


def option_lines(model: Any) -> list[str]:
    """One line per option of a job's pydantic options model: name, type, default, description.

    >>> from pydantic import BaseModel, Field
    >>> class Options(BaseModel):
    ...     threshold: float = Field(0.5, description="alert at or above this")
    >>> option_lines(Options)
    ['    threshold            float      default 0.5       alert at or above this']
    """
    lines = []
    for name, info in model.model_fields.items():
        default = "required" if type(info.default).__name__ in _MISSING else f"default {info.default!r}"
        lines.append(f"    {name:<20} {_type_name(info.annotation):<10} {default:<17} {info.description or ''}".rstrip())
    return lines


def _output_line(job: Job, name: str) -> str:
    output = job.outputs[name]
    modes = ", ".join(f"{m} (default)" if m == output.default_mode else m for m in output.modes)
    mark = "*" if name in job.default_outputs else " "
    key = ", ".join(output.key) or "-"
    reads = f"; reads --{', --'.join(output.inputs)}" if output.inputs else ""
    state = "stateful" if output.stateful else "stateless"
    return f"    {name + ' ' + mark:<20} {modes}; key {key}; {state}{reads}: {output.summary}"


def describe(job: Job, origin: str) -> list[str]:
    """The lines that describe ``job``; ``origin`` says where it comes from (a package, a module)."""
    schema = job.schema
    source = job.default_source or "none (a run gives --source)"
    lines = [f"{job.name}: {job.summary}", f"  from: {origin}", f"  default source: {source}",
             f"  events: {schema.name} (event time: {schema.time_field}; an invalid event, or one further ahead of its "
             "ingest time than --max-ahead, is a dead letter)"]
    lines += [_field_line(field) for field in schema.fields]
    for name, second in job.inputs.items():
        lines.append(f"  second stream {name}: {second.name} (its source: --{name} URI; "
                     f"fields {', '.join(f.name for f in second.fields)})")
    lines.append("  outputs (* written when no --sink is given; modes, key):")
    lines += [_output_line(job, name) for name in job.outputs]
    if job.options is not None:
        lines.append("  options (--option KEY=VALUE, or options: in a config file):")
        lines += option_lines(job.options)
    else:
        lines.append("  options: none")
    if job.defaults:
        lines.append("  run settings it defaults: " + ", ".join(f"{k}={v}" for k, v in job.defaults.items()))
    if job.trainer is not None:
        lines.append(f"  model: {job.trainer.summary or 'fitted before it runs'} (speedlayer train {job.name}; "
                     "settings as flags or --option KEY=VALUE):")
        lines += option_lines(job.trainer.options)
    return lines
