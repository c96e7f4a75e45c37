"""A job file's reference tables at run time: its variables as the job's options, the checks before
start, the paths a cluster must share, and each table read as the view its SQL names.

The variables are the job's options, so they are flags of ``speedlayer run`` like any job's
(``--ref-dir DIR``, ``--option ref_dir=DIR``, ``ref_dir:`` in a config file), listed by
``speedlayer run orders.yaml --help``, and compared by name when a run resumes.

>>> Options = variables_model(spec)            # doctest: +SKIP
>>> Options(ref_dir="/data").ref_dir           # doctest: +SKIP
'/data'
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, create_model
from pydantic import Field as Option
from pyspark.sql import DataFrame, SparkSession

from speedlayer.core.errors import ConfigError
from speedlayer.core.tables import TableRef
from speedlayer.pipelines.base import Params
from speedlayer.pipelines.job_file.reading import mistakes
from speedlayer.pipelines.job_file.references import ReferenceSpec, VariableSpec, resolve, variables_in
from speedlayer.pipelines.tables import is_local, local_path, reference_table, shared_dir, table_ref


def variables_model(variables: Mapping[str, VariableSpec]) -> type[BaseModel] | None:
    """The job's options model: one text option per variable, with its default; None without variables."""
    if not variables:
        return None
    fields: dict[str, Any] = {
        name: (str | None, Option(v.default, description=v.summary or f"the variable ${{{name}}} of the job file"))
        for name, v in variables.items()}
    return create_model("JobFileVariables", **fields)


def _values(params: Params) -> tuple[dict[str, str], set[str]]:
    """The variables' values (those with one) and the names the run gave."""
    options = params.options
    if options is None:
        return {}, set()
    values = {k: v for k, v in options.model_dump().items() if v is not None}
    return values, set(options.model_fields_set)


def table_paths(references: Mapping[str, ReferenceSpec], params: Params, file: str) -> dict[str, str]:
    """Where each table is read from, its variables put in (those with a value)."""
    values, given = _values(params)
    base = Path(file).resolve().parent
    return {name: resolve(spec.path, values, given, base) for name, spec in references.items()
            if all(v in values for v in variables_in(spec.path))}


def check_tables(params: Params, *, references: Mapping[str, ReferenceSpec], file: str) -> None:
    """Before start: every variable a path uses has a value, and every local table exists; all mistakes
    at once, each with its line in the file."""
    values, _ = _values(params)
    found: list[dict[str, Any]] = []
    for name in dict.fromkeys(v for spec in references.values() for v in variables_in(spec.path) if v not in values):
        flag = "--" + name.replace("_", "-")
        found.append({"loc": ("variables", name), "type": "value_error",
                      "msg": f"the variable {name!r} has no value: give it to the run ({flag} VALUE, or {name}: "
                             "in --config), or a default in the file"})
    for name, path in table_paths(references, params, file).items():
        if is_local(path) and not local_path(path).exists():
            found.append({"loc": ("references", name, "path"), "type": "value_error",
                          "msg": f"{references[name].path} is {path}, which does not exist: give the variable "
                                 "another value, or put the table there"})
    if found:
        text = Path(file).read_text()
        raise ConfigError(mistakes(Path(file), found, yaml.compose(text)))


def shared_table_paths(params: Params, *, references: Mapping[str, ReferenceSpec], file: str) -> dict[str, Path]:
    """The local directories executors read tables from (a file's own directory): a cluster must share them."""
    dirs = {name: shared_dir(path) for name, path in table_paths(references, params, file).items()}
    return {f"reference table {name}": folder for name, folder in dirs.items() if folder is not None}


def sql_tables(params: Params, *, references: Mapping[str, ReferenceSpec], file: str) -> dict[str, TableRef]:
    """Each table as ``speedlayer sql`` reads it (``Job.tables``): where its variables put it."""
    paths = table_paths(references, params, file)
    return {name: table_ref(paths[name], spec.table_format, spec.options, spec.schema_)
            for name, spec in references.items() if name in paths}


def read_tables(spark: SparkSession, references: Mapping[str, ReferenceSpec], params: Params,
                file: str) -> dict[str, DataFrame]:
    """Each table by its name, pinned or read at every batch as its ``refresh`` says."""
    paths = table_paths(references, params, file)
    return {name: reference_table(spark, paths[name], spec.table_format, spec.options, spec.schema_, spec.refresh,
                                  name=f"reference table {name!r} of {file}")
            for name, spec in references.items()}
