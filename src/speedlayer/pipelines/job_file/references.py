"""A job file's reference tables and variables: their format, where their paths lead, and the checks
that need no Spark (see docs/job-files.md).

    variables:
      ref_dir: {default: ref, summary: directory of the reference tables}
    references:
      customers: {path: "${ref_dir}/customers.csv", options: {delimiter: ";"}}

A path may use the variables as ``${name}`` (``$$`` is a ``$``). A relative path is taken from the
job file's directory, unless it starts with a variable given to the run (``--ref-dir DIR``): then
from the current directory, where the user typed it.

>>> substitute("${ref_dir}/customers.csv", {"ref_dir": "/data"})
'/data/customers.csv'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from speedlayer.pipelines.tables import format_of, is_local, local_path

Format = Literal["csv", "json", "parquet", "orc", "text"]
#: a variable in a path, or ``$$``
_VARIABLE = re.compile(r"\$\$|\$\{([^}]*)\}")
#: a table or variable name: a plain SQL identifier
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: the view of the stream, which no table may take
STREAM_VIEW = "events"


class ReferenceSpec(BaseModel):
    """One table the SQL reads by its name: ``{path, format, options, schema, refresh}``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    path: str = Field(min_length=1)
    format: Format | None = None
    options: dict[str, str | int | float | bool] = Field(default_factory=dict)
    schema_: str | None = Field(None, alias="schema", min_length=1)
    refresh: bool = False
    summary: str = ""

    @property
    def table_format(self) -> str | None:
        """``format``, else the one the path's ending names."""
        return self.format or format_of(self.path)


class VariableSpec(BaseModel):
    """A value a path takes from the run: ``--NAME VALUE``, else its ``default`` (none: the run must give it)."""

    model_config = ConfigDict(extra="forbid")

    default: str | None = None
    summary: str = ""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        """``ref_dir: ref`` is ``ref_dir: {default: ref}``; ``ref_dir:`` alone has no default."""
        if value is None:
            return {}
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return {"default": str(value)}
        return value

    @field_validator("default", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def variables_in(template: str) -> list[str]:
    """The variables ``template`` uses, in order.

    >>> variables_in("${ref_dir}/rates-${day}.csv"), variables_in("a$$b.csv")
    (['ref_dir', 'day'], [])
    """
    return [m.group(1) for m in _VARIABLE.finditer(template) if m.group(0) != "$$"]


def substitute(template: str, values: Mapping[str, str]) -> str:
    """``template`` with each ``${name}`` replaced by its value and ``$$`` by ``$``."""
    return _VARIABLE.sub(lambda m: "$" if m.group(0) == "$$" else values[m.group(1)], template)


def resolve(template: str, values: Mapping[str, str], given: Iterable[str], base: Path) -> str:
    """Where ``template`` leads: its variables put in, a relative local path taken from ``base`` (the
    job file's directory), or from the current directory when it starts with a variable in ``given``.

    >>> resolve("ref/c.csv", {}, (), Path("/jobs"))
    '/jobs/ref/c.csv'
    >>> resolve("${d}/c.csv", {"d": "x"}, {"d"}, Path("/jobs")) == str(Path.cwd() / "x" / "c.csv")
    True
    """
    path = substitute(template, values)
    if not is_local(path):
        return path
    local = local_path(path)
    if local.is_absolute():
        return str(local)
    first = variables_in(template)[:1]
    starts_given = bool(first) and template.startswith(f"${{{first[0]}}}") and first[0] in set(given)
    return str((Path.cwd() if starts_given else base) / local)


def reads(sql: str, table: str) -> bool:
    """Whether ``sql`` names ``table`` (as a word, in any case, outside quotes).

    >>> reads("SELECT * FROM events e JOIN Customers c USING (customer)", "customers"), reads("SELECT 'customers'", "customers")
    (True, False)
    """
    unquoted = re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "''", sql)
    return re.search(rf"(?<![\w`.]){re.escape(table)}(?![\w`])|`{re.escape(table)}`", unquoted, re.IGNORECASE) is not None


def _mistake(loc: tuple, message: str) -> dict[str, Any]:
    """A mistake in the shape of pydantic's errors, so the reader tells it with its line among the others."""
    return {"loc": loc, "type": "value_error", "msg": message}


def reference_mistakes(data: Mapping[str, Any], base: Path) -> list[dict[str, Any]]:
    """What is wrong with the raw job file's references and variables that its format alone does not
    say: a name that is no identifier or clashes with the stream's view or another table, a path with
    an undeclared variable or (without variables) to nothing, no format to be told, a table no output's
    SQL reads, a variable no path uses. Malformed parts are left to the format's own errors.
    """
    references, variables = data.get("references"), data.get("variables")
    references = references if isinstance(references, Mapping) else {}
    declared = set(variables) if isinstance(variables, Mapping) else set()
    outputs = data.get("outputs")
    sqls = [o["sql"] for o in outputs.values() if isinstance(o, Mapping) and isinstance(o.get("sql"), str)] \
        if isinstance(outputs, Mapping) else []
    found: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    used: set[str] = set()
    for name, spec in references.items():
        name = str(name)
        loc = ("references", name)
        if not _NAME.fullmatch(name):
            found.append(_mistake(loc, f"{name!r} is not a table name: use letters, digits and underscores, "
                                       "starting with a letter (e.g. customers)"))
        elif name.lower() == STREAM_VIEW:
            found.append(_mistake(loc, f"{name!r} is the view of the stream's events: give the table another name"))
        elif name.lower() in seen:
            found.append(_mistake(loc, f"{name!r} and {seen[name.lower()]!r} are one name to SQL (names are "
                                       "case-insensitive): rename one"))
        elif sqls and not any(reads(sql, name) for sql in sqls):
            found.append(_mistake(loc, f"no output's SQL reads the table {name!r}: join it in an output "
                                       f"(... JOIN {name} ON ...), or remove it"))
        seen.setdefault(name.lower(), name)
        if not isinstance(spec, Mapping) or not isinstance(spec.get("path"), str):
            continue
        path = spec["path"]
        names = variables_in(path)
        used.update(names)
        undeclared = [v for v in names if v not in declared]
        if undeclared:
            found.append(_mistake((*loc, "path"), f"${{{undeclared[0]}}} is not a declared variable: add it under "
                                                  f"variables: (e.g. {undeclared[0] or 'name'}: {{default: ...}}), "
                                                  "or fix the name"))
        elif not names and is_local(path) and not Path(resolve(path, {}, (), base)).exists():
            found.append(_mistake((*loc, "path"), f"{resolve(path, {}, (), base)} does not exist: fix the path "
                                                  f"(a relative path is taken from the job file's directory, {base})"))
        if spec.get("format") is None and format_of(path) is None:
            found.append(_mistake((*loc, "path"), f"{path!r} does not end with a format's name: add format: "
                                                  "csv, json, parquet, orc or text"))
    for name in declared:
        if not _NAME.fullmatch(str(name)):
            found.append(_mistake(("variables", name), f"{name!r} is not a variable name: use letters, digits and "
                                                       "underscores, starting with a letter (e.g. ref_dir)"))
        elif name not in used:
            found.append(_mistake(("variables", name), f"no reference path uses the variable {name!r}: use it as "
                                                       f"${{{name}}} in a path, or remove it"))
    return found
