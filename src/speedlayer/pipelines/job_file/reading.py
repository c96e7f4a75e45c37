"""Reading a job file: YAML to a validated ``JobFileSpec``, or one line naming the file and every
mistake in it, each with its line, key and fix.

>>> read_spec(Path("orders.yaml")).name  # doctest: +SKIP
'orders'
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.job_file.references import reference_mistakes
from speedlayer.pipelines.job_file.spec import JobFileSpec

#: what a missing key holds, said when it is missing
_WHAT = {
    "name": "the job's name, e.g. name: orders",
    "schema": "the events' fields and time_field",
    "time_field": "the timestamp field that is event time",
    "fields": "a list of {name, type} for each field of the events",
    "type": "one of string, double, long, boolean, timestamp",
    "outputs": "at least one output with its sql",
    "sql": "a Spark SQL query over the view events",
    "path": "the table's file, directory or URI, e.g. path: ref/customers.csv",
}


def read_spec(path: Path) -> JobFileSpec:
    """The job file at ``path``, validated; a ConfigError in one line otherwise."""
    if not path.is_file():
        raise ConfigError(f"job file {path} does not exist: check its path (the JOB argument, --job-file or job_file:)")
    try:
        text = path.read_text()
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"job file {path} is not valid YAML{where} ({problem}): fix its syntax "
                          "(a value holding ': ' or starting with a quote must be quoted whole)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"job file {path} cannot be read ({exc.__class__.__name__}): check the file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"job file {path} must be a mapping with name:, schema: and outputs: (see docs/job-files.md)")
    found = reference_mistakes(data, path.resolve().parent)  # told with the format's own mistakes, all at once
    try:
        spec = JobFileSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(mistakes(path, [*exc.errors(), *found], yaml.compose(text))) from None
    if found:
        raise ConfigError(mistakes(path, found, yaml.compose(text)))
    return spec


def mistakes(path: Path, errors: list[Mapping], root: yaml.Node | None) -> str:
    """Every mistake in one line, each with its line in the file, in the file's order (on one line a
    misspelt key first: it is often why another key is missing).

    >>> mistakes(Path("j.yaml"), [{"loc": ("name",), "type": "missing", "msg": "Field required"}], None)
    "job file j.yaml: name is missing: add it (the job's name, e.g. name: orders)"
    """
    found = [(line_of(root, tuple(e["loc"])), e["type"] != "extra_forbidden", describe(e)) for e in errors]
    told = [(line, said) for line, _, said in sorted(found, key=lambda f: (f[0] is None, f[0] or 0, f[1]))]
    if len(told) == 1:
        line, said = told[0]
        return f"job file {path}{f', line {line}' if line else ''}: {said}"
    return f"job file {path} has {len(told)} mistakes: " + "; ".join(
        f"{f'line {line}: ' if line else ''}{said}" for line, said in told)


def line_of(root: yaml.Node | None, loc: tuple) -> int | None:
    """The line (from 1) of the YAML node at ``loc`` (keys and list indexes), or of the nearest one above
    it that exists (a missing key: its mapping); None for a mistake of the whole file."""
    if root is None or not loc:
        return None
    node = root
    for depth, part in enumerate(loc, start=1):
        if isinstance(node, yaml.MappingNode):  # the last key's own line, not its value's
            found = next((key if depth == len(loc) else value for key, value in node.value if key.value == str(part)),
                         None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            found = node.value[part]
        else:
            found = None
        if found is None:
            break
        node = found
    return node.start_mark.line + 1


def describe(error: Mapping) -> str:
    """One pydantic error as a phrase: the key (``outputs.revenue.modes.0``), what is wrong, the fix."""
    loc = tuple(error["loc"])
    key = ".".join(str(p) for p in loc)
    kind, message = error["type"], str(error["msg"]).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        known = _known_keys(loc[:-1])
        return f"unknown key {key!r}: " + (f"use one of {', '.join(known)}" if known else "remove it")
    if kind == "missing":
        what = _WHAT.get(str(loc[-1]))
        return f"{key} is missing: add it" + (f" ({what})" if what else "")
    if kind in ("string_type", "literal_error") and isinstance(error.get("input"), (bool, int, float)):
        message += " (YAML reads yes, no, on, off and numbers as such): quote the value"
    where = f"{key}: " if key else ""
    if kind == "value_error":
        return f"{where}{message}"
    return f"{where}{message} (got {error.get('input')!r})"


def _known_keys(loc: tuple) -> list[str]:
    """The keys the mapping at ``loc`` takes (by alias), found by walking the model's fields."""
    model: Any = JobFileSpec
    for part in loc:
        model = _step(model, part)
        if model is None:
            return []
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [f.alias or name for name, f in model.model_fields.items()]
    return []


def _step(annotation: Any, part: Any) -> Any:
    """The type one step into ``annotation``: a model's field, a list's item, a dict's value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, f in annotation.model_fields.items():
            if part in (name, f.alias):
                return _unwrap(f.annotation)
        return None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and args:
        return _unwrap(args[0])
    if origin is dict and len(args) == 2:
        return _unwrap(args[1])
    return None


def _unwrap(annotation: Any) -> Any:
    """``X | None`` as ``X``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation
