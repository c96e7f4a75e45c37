"""The job file's format: a pydantic model of the YAML, unknown keys refused, checks that need no Spark.

Every refusal is one line naming the file and the key, with the fix (``speedlayer.pipelines.job_file.errors``).
The format, key by key, is documented in docs/job-files.md.

>>> spec = JobFileSpec.model_validate(yaml.safe_load(Path("orders.yaml").read_text()))  # doctest: +SKIP
>>> spec.outputs["revenue"].modes                                                     # doctest: +SKIP
['append', 'update', 'complete']
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from speedlayer.core.durations import parse_duration
from speedlayer.core.errors import ConfigError
from speedlayer.core.keys import key_problems
from speedlayer.pipelines.job_file.references import ReferenceSpec, VariableSpec

Kind = Literal["string", "double", "long", "boolean", "timestamp"]
Mode = Literal["append", "update", "complete"]

#: a field or key column: a plain SQL identifier, so the SQL names it without quotes
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: a job or output name, as the CLI (``--sink NAME=URI``) and query names take it
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
#: columns decode adds to every event (a field of that name would clash)
RESERVED_FIELDS = ("ingest_time", "offset")
#: outputs every job file job gets: dead letters, and with a dedup key the late events (the generic late output)
RESERVED_OUTPUTS = ("dead-letters", "late")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class FieldSpec(_Strict):
    """One field of the event: ``{name: amount, type: double, min: 0, max: 100000}``."""

    name: str
    type: Kind
    required: bool = True
    min: float | None = None
    max: float | None = None
    allowed: list[str] | None = Field(None, min_length=1)

    @field_validator("name")
    @classmethod
    def _identifier(cls, name: str) -> str:
        if not IDENTIFIER.fullmatch(name) or name.startswith("_"):
            raise ValueError(f"{name!r} is not a plain identifier: use letters, digits and underscores, "
                             "starting with a letter (e.g. order_id)")
        if name.lower() in RESERVED_FIELDS:
            raise ValueError(f"{name!r} is a column decode adds to every event: rename the field")
        return name

    @model_validator(mode="after")
    def _checks_fit_the_type(self) -> FieldSpec:
        if (self.min is not None or self.max is not None) and self.type not in ("double", "long"):
            raise ValueError(f"field {self.name!r}: min and max apply to double and long fields, not {self.type}: "
                             "remove them or change the type")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"field {self.name!r}: min {self.min:g} is above max {self.max:g}: swap them")
        if self.allowed is not None and self.type != "string":
            raise ValueError(f"field {self.name!r}: allowed values apply to string fields, not {self.type}: "
                             "remove them or make the field a string")
        return self


class SchemaSpec(_Strict):
    """The events: their fields and which one is event time."""

    name: str | None = None
    time_field: str
    fields: list[FieldSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _fields_fit(self) -> SchemaSpec:
        seen: set[str] = set()
        for f in self.fields:
            if f.name.lower() in seen:  # Spark's SQL does not tell apart names that differ in case only
                raise ValueError(f"field {f.name!r} is given twice (names are case-insensitive in SQL): keep one")
            seen.add(f.name.lower())
        time = self.field(self.time_field)
        if time is None:
            raise ValueError(f"time_field {self.time_field!r} is not one of the fields "
                             f"({', '.join(f.name for f in self.fields)}): name the timestamp field of event time")
        if time.type != "timestamp" or not time.required:
            raise ValueError(f"time_field {self.time_field!r} must be a required timestamp field: "
                             f"give it type: timestamp and no required: false")
        return self

    def field(self, name: str) -> FieldSpec | None:
        return next((f for f in self.fields if f.name == name), None)


class OutputSpec(_Strict):
    """One output: Spark SQL over the view ``events``, the modes it may be written in, its key."""

    summary: str = ""
    sql: str = Field(min_length=1)
    modes: list[Mode] = Field(default_factory=lambda: ["append"], min_length=1)
    default_mode: Mode | None = None
    key: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _modes_fit(self) -> OutputSpec:
        if len(set(self.modes)) != len(self.modes):
            raise ValueError(f"modes {self.modes} repeats a mode: list each once")
        if self.default_mode is not None and self.default_mode not in self.modes:
            raise ValueError(f"default_mode {self.default_mode} is not one of its modes ({', '.join(self.modes)}): "
                             "add it to modes or choose one of them")
        bad = next((k for k in self.key if not IDENTIFIER.fullmatch(k)), None)
        if bad is not None:
            raise ValueError(f"key column {bad!r} is not a plain identifier: alias the column in the SQL "
                             "(AS name) and name that")
        return self

    @property
    def mode(self) -> str:
        """The mode a run writes when none is given: ``default_mode``, else the first of ``modes``."""
        return self.default_mode or self.modes[0]


class DefaultsSpec(_Strict):
    """Run settings this job defaults differently; a flag or the config file wins."""

    watermark: str | None = None
    max_ahead: str | None = None
    dedup: Literal["exact", "fast"] | None = None
    #: the tumbling window each row of the late output names (the outputs' own windows are in their SQL)
    window: str | None = None

    @field_validator("watermark", "max_ahead", "window", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0:
            raise ValueError(f"{value} has no unit: write e.g. {value}s or {value}ms")
        if value is not None:
            value = str(value)
            try:
                parse_duration(value)
            except ConfigError:
                raise ValueError(f"{value!r} is not a duration: use a number with a unit, e.g. 500ms, 10s, 1min") from None
        return value

    def settings(self) -> dict[str, str]:
        """The defaults given, as run settings (``Job.defaults``)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class JobFileSpec(_Strict):
    """A whole job file (see docs/job-files.md)."""

    name: str
    summary: str = ""
    schema_: SchemaSpec = Field(alias="schema")
    #: the field, or the fields together, that identify an event (one name is a list of one)
    dedup_key: list[str] | None = None
    defaults: DefaultsSpec = Field(default_factory=DefaultsSpec)
    default_source: str | None = None
    default_outputs: list[str] | None = None
    outputs: dict[str, OutputSpec] = Field(min_length=1)
    #: static tables the SQL reads by name (a stream-static join), and the values their paths take from the run
    references: dict[str, ReferenceSpec] = Field(default_factory=dict)
    variables: dict[str, VariableSpec] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _job_name(cls, name: str) -> str:
        if not NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a job name: use letters, digits, '-' and '_' (e.g. orders)")
        return name

    @field_validator("outputs")
    @classmethod
    def _output_names(cls, outputs: dict[str, OutputSpec]) -> dict[str, OutputSpec]:
        for name in outputs:
            if not NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an output name: use letters, digits, '-' and '_' (e.g. big-orders)")
            if name in RESERVED_OUTPUTS:
                raise ValueError(f"{name!r} is an output every job file job gets: give yours another name")
        return outputs

    @field_validator("dedup_key", mode="before")
    @classmethod
    def _one_name_or_several(cls, value: object) -> object:
        return [value] if value is not None and not isinstance(value, list) else value

    @field_validator("dedup_key")
    @classmethod
    def _key_fits_the_schema(cls, key: list[str] | None, info: ValidationInfo) -> list[str] | None:
        schema = info.data.get("schema_")  # absent when the schema has mistakes of its own, told apart
        if key is not None and schema is not None:
            # a job file always offers the late output with a dedup key
            problems = key_problems(key, {f.name: f.required for f in schema.fields}, schema.time_field, late=True,
                                    write=lambda fields: f"dedup_key: [{', '.join(fields)}]")
            if problems:
                raise ValueError("; ".join(problems))
        return key

    @property
    def key(self) -> str | tuple[str, ...] | None:
        """The dedup key as ``Job.dedup_key`` takes it: one name as itself, several as a tuple."""
        if self.dedup_key is None:
            return None
        return self.dedup_key[0] if len(self.dedup_key) == 1 else tuple(self.dedup_key)

    @model_validator(mode="after")
    def _references(self) -> JobFileSpec:
        unknown = [n for n in self.default_outputs or [] if n not in self.outputs and n != "dead-letters"]
        if unknown:
            raise ValueError(f"default_outputs names {unknown[0]!r}, which is not an output: "
                             f"choose among {', '.join(self.outputs)}")
        return self

    def digest(self) -> str:
        """What the job computes, hashed: schema, dedup key, outputs (SQL, modes, key) and reference tables
        (as written: a path's variables are run options), not summaries, comments or defaults (those reach
        the run's settings, which the manifest compares on their own).

        >>> spec.digest()  # doctest: +SKIP
        'sha256:3f0c5e1d9a2b'
        """
        what = self.model_dump(mode="json", by_alias=True, include={"name", "schema_", "outputs"},
                               exclude={"outputs": {"__all__": {"summary"}}})
        what["dedup_key"] = self.key  # one name hashed as the format first wrote it: earlier runs resume
        if self.references:  # a file without tables keeps the digest it had before tables existed
            what["references"] = self.model_dump(mode="json", by_alias=True, include={"references"},
                                                 exclude={"references": {"__all__": {"summary"}}})["references"]
        return "sha256:" + hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
