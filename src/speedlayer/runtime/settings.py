"""Run settings: from a YAML file (``--config``) and CLI flags, flags winning; validated by pydantic.

    # fleet.yaml
    job: fleet                # or job_file: orders.yaml (a job file, see docs/job-files.md)
    source: generator://?rate=20000&seed=7
    sinks:
      windows: parquet:out/windows
      alerts: parquet:out/alerts
    trigger: processing:5s
    output_mode: {windows: append}
    watermark: 5s
    conf: {spark.sql.shuffle.partitions: "4"}
    max_state_memory: 1g      # RocksDB's memory for all state stores (default 500m)
    retain_batches: 20        # batches each checkpoint keeps (Spark's default: 100)
    max_checkpoint_size: 10g  # warn once past it (default: off)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from speedlayer.core.durations import parse_duration
from speedlayer.core.errors import ConfigError
from speedlayer.core.sizes import parse_size
from speedlayer.core.uris import is_secret_option, mask_secrets
from speedlayer.runtime.bounds import (
    DEFAULT_MAX_STATE_MEMORY,
    DEFAULT_RETAIN_BATCHES,
    bounds_conf,
    check_retain_batches,
    heap_up_front,
    state_memory_mb,
)
from speedlayer.runtime.triggers import parse_trigger

DEFAULT_SOURCE = "generator://"
#: settings of earlier versions that name a job's second stream (now ``inputs``)
LEGACY_INPUTS = ("rides",)


class RunSettings(BaseModel):
    """Everything ``speedlayer run`` needs; unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")

    #: a built-in job's name (``speedlayer jobs``); a run gives this or ``job_file``
    job: str | None = None
    #: the path of a job file (``--job-file``, see docs/job-files.md)
    job_file: str | None = None
    source: str = DEFAULT_SOURCE
    sinks: dict[str, str] = Field(default_factory=dict)
    trigger: str = "processing:0s"
    output_mode: dict[str, str] = Field(default_factory=dict)  # {"*": mode} applies to every output
    watermark: str = "5s"
    #: how far an event time may lie ahead of its ingest time (None: a fifth of the watermark delay)
    max_ahead: str | None = None
    #: which copy of a re-sent event counts on a stream: "exact" the lowest offset, "fast" the first Spark meets
    dedup: Literal["exact", "fast"] = "exact"
    window: str = "10s"
    slide: str = "10s"
    sliding_window: str = "1min"
    state_dir: str | None = None
    duration: float | None = Field(None, gt=0)
    max_events: int | None = Field(None, gt=0)
    master: str = "local[*]"
    conf: dict[str, str] = Field(default_factory=dict)
    #: the sources of a job's second streams by name (``--input rides=URI``; the fleet's ``--rides URI``)
    inputs: dict[str, str] = Field(default_factory=dict)
    #: the job's own options (``--option KEY=VALUE``, their own flags such as ``--trip-gap``, or a config
    #: file's ``options:`` and loose keys), validated against the job's options model when the run is planned
    options: dict[str, str] = Field(default_factory=dict)
    #: resume from a state directory even though result-changing settings differ (``--allow-changed-settings``)
    allow_changed_settings: bool = False
    #: write the append outputs whose sinks take micro-batches in one shared query (``--one-query``)
    one_query: bool = False
    #: the Spark UI: on loopback ("local"), "off", or "open" on every interface (``--spark-ui``)
    spark_ui: Literal["local", "off", "open"] = "local"
    #: what a cluster's executors get: "auto" (speedlayer and its packages, packed), "none", or an archive's path
    ship: str = "auto"
    #: RocksDB's memory for all the run's state stores together, e.g. 512m, 1g (``--max-state-memory``)
    max_state_memory: str = DEFAULT_MAX_STATE_MEMORY
    #: batches whose offsets, commits and state versions each checkpoint keeps (``--retain-batches``)
    retain_batches: int = DEFAULT_RETAIN_BATCHES
    #: warn once when the run's checkpoints pass this size on disk, e.g. 10g (``--max-checkpoint-size``; off)
    max_checkpoint_size: str | None = None
    #: keys of ``options`` that a config file gave as loose settings (a typo there is named as a setting)
    _loose: frozenset[str] = PrivateAttr(default_factory=frozenset)

    @model_validator(mode="wrap")
    @classmethod
    def _loose_keys_are_job_settings(cls, data: Any, handler: Any) -> RunSettings:
        """A key that is no run setting is one of the job's options (a config file's ``trip_gap: 10min``,
        ``speedlayer.run(job, trip_gap="10min")``); ``rides`` is the ``rides`` input. Options given as
        such win over loose keys; the plan checks the loose keys against the job's options."""
        loose: dict[str, Any] = {}
        if isinstance(data, Mapping):
            data = dict(data)
            for key in [k for k in data if k not in cls.model_fields]:
                if key in LEGACY_INPUTS:
                    data["inputs"] = {key: data.pop(key), **(data.get("inputs") or {})}
                else:
                    loose[key] = data.pop(key)
            if loose:
                data["options"] = {**loose, **(data.get("options") or {})}
        settings = handler(data)
        settings._loose = frozenset(loose)
        return settings

    @field_validator("output_mode", mode="before")
    @classmethod
    def _one_mode_for_all(cls, value: Any) -> Any:
        return {"*": value} if isinstance(value, str) else value

    @field_validator("duration", mode="before")
    @classmethod
    def _duration_in_seconds(cls, value: Any) -> Any:
        """``90`` is seconds; ``90s``, ``5min``, ``2h`` say their unit."""
        if isinstance(value, str) and value.strip() and not value.strip().replace(".", "", 1).isdigit():
            return parse_duration(value, "--duration") / 1000
        return value

    @field_validator("max_state_memory")
    @classmethod
    def _state_memory_is_a_size(cls, value: str) -> str:
        state_memory_mb(value)
        return value

    @field_validator("max_checkpoint_size")
    @classmethod
    def _checkpoint_size_is_a_size(cls, value: str | None) -> str | None:
        if value is not None:
            parse_size(value, "--max-checkpoint-size")
        return value

    @field_validator("retain_batches")
    @classmethod
    def _retain_at_least_one(cls, value: int) -> int:
        return check_retain_batches(value)

    @field_validator("conf", "options", "inputs", mode="before")
    @classmethod
    def _conf_as_text(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _one_job(self) -> RunSettings:
        if self.job and self.job_file:
            raise ValueError(f"give a JOB or --job-file, not both (got job {self.job!r} and job_file {self.job_file!r})")
        if not self.job and not self.job_file:
            raise ValueError("no job to run: give a JOB (see 'speedlayer jobs') or --job-file FILE")
        return self

    def masked(self) -> dict[str, Any]:
        """The settings with every secret masked (URI passwords, secret-looking conf, URI and job options),
        for printing and run manifests."""
        data = self.model_dump()
        data["source"] = mask_secrets(self.source)
        data["inputs"] = {k: mask_secrets(v) for k, v in self.inputs.items()}
        data["sinks"] = {k: mask_secrets(v) for k, v in self.sinks.items()}
        data["conf"] = {k: ("***" if is_secret_option(k) else v) for k, v in self.conf.items()}
        data["options"] = {k: ("***" if is_secret_option(k) else v) for k, v in self.options.items()}
        return data

    def spark_conf(self) -> dict[str, str]:
        """The Spark settings of this run: the bounds its flags set (``bounds_conf``) under the user's ``conf``,
        which wins key by key; a run that goes on until stopped commits and touches the driver's heap up front
        (``heap_up_front``), a bounded one (``--max-events``, ``available-now``, ``once``) does not.

        >>> RunSettings(job="fleet", retain_batches=5).spark_conf()["spark.sql.streaming.minBatchesToRetain"]
        '5'
        >>> RunSettings(job="fleet").spark_conf()["spark.driver.extraJavaOptions"]
        '-Xms2048m -XX:+AlwaysPreTouch'
        """
        conf = {**bounds_conf(self.max_state_memory, self.retain_batches), **self.conf}
        bounded = self.max_events is not None or parse_trigger(self.trigger).bounded
        return conf if bounded else heap_up_front(conf)

    def with_job_defaults(self, defaults: Mapping[str, str]) -> RunSettings:
        """These settings with the job's own defaults for every setting nobody gave.

        >>> RunSettings(job="wordcount").with_job_defaults({"slide": "10s"}).slide
        '10s'
        """
        return self.model_copy(update={k: v for k, v in defaults.items() if k not in self.model_fields_set})


#: the largest --max-ahead taken: an event accepted that far ahead holds every window back as long
MAX_AHEAD_CAP_MS = 86_400_000
#: the least default allowance: two clocks on one network differ by that much (a watermark of
#: 0 s would otherwise refuse an event stamped a millisecond before it was received)
MIN_DEFAULT_AHEAD_MS = 1_000


def max_ahead_ms(max_ahead: str | None, watermark: str) -> int:
    """How far ahead of its ingest time an event may be, in ms: ``max_ahead``, else a fifth of the
    watermark delay, at least 1 s.

    An event accepted A ahead moves the watermark by A, and an on-time event then counts only if it
    is less than (delay - A) behind the newest: a fifth keeps four fifths of the delay for disorder.

    >>> max_ahead_ms(None, "5s"), max_ahead_ms(None, "10min"), max_ahead_ms("250ms", "5s"), max_ahead_ms(None, "0s")
    (1000, 120000, 250, 1000)
    """
    if max_ahead is None:
        return max(parse_duration(watermark, "--watermark") // 5, MIN_DEFAULT_AHEAD_MS)
    ms = parse_duration(max_ahead, "--max-ahead")
    if ms > MAX_AHEAD_CAP_MS:
        raise ConfigError(f"--max-ahead {max_ahead} is over a day: one event that far ahead would hold back every "
                          "window as long; give at most 1d (the default is a fifth of --watermark)")
    return ms


def pairs(items: list[str] | None, flag: str, hint: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` as a dict; a malformed or repeated item is a ConfigError naming the flag.

    >>> pairs(["windows=parquet:out/w"], "--sink", "NAME=URI")
    {'windows': 'parquet:out/w'}
    """
    result: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(f"{flag} {item!r} is not {hint}")
        if key.strip() in result:
            raise ConfigError(f"{flag} gives {key.strip()!r} twice: keep one")
        result[key.strip()] = value.strip()
    return result


def output_modes(items: list[str] | None) -> dict[str, str]:
    """``--output-mode update`` (every output) or ``--output-mode windows=update`` (one output)."""
    modes: dict[str, str] = {}
    for item in items or []:
        if "=" in item:
            modes.update(pairs([item], "--output-mode", "MODE or NAME=MODE"))
        else:
            modes["*"] = item.strip()
    return modes


def load_yaml(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {path} does not exist: check the path given to --config")
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}: fix its syntax") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping of settings (job:, source:, sinks:, ...)")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def build_settings(file_values: Mapping[str, Any], flag_values: Mapping[str, Any]) -> RunSettings:
    """Merge the YAML file's values with the flags given on the command line (flags win).

    Mappings (sinks, conf, output modes, job options) merge key by key.
    """
    merged: dict[str, Any] = dict(file_values)
    for key, other in (("job", "job_file"), ("job_file", "job")):
        if flag_values.get(key):  # a job given on the command line replaces the config file's
            merged.pop(other, None)
    if "output_mode" in merged:
        merged["output_mode"] = RunSettings._one_mode_for_all(merged["output_mode"])
    for key, value in flag_values.items():
        if value is None or value == {} or value == []:
            continue
        if key in ("sinks", "conf", "output_mode", "options") and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    try:
        settings = RunSettings(**merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        if not err["loc"]:  # the settings as a whole (which job)
            raise ConfigError(str(err["msg"]).removeprefix("Value error, ")) from None
        name = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            raise ConfigError(f"unknown setting {name!r}: known settings are {', '.join(RunSettings.model_fields)}") from None
        if err["type"] == "missing":
            raise ConfigError(f"setting {name!r} is required: give it on the command line or in the config file") from None
        got = "***" if is_secret_option(name) else repr(err.get("input"))
        raise ConfigError(f"setting {name!r}: {err['msg']} (got {got})") from None
    return settings

