"""A job's own settings as flags of ``speedlayer run``: every option of its options model becomes
``--option-name VALUE`` (a boolean ``--name/--no-name``), every second stream ``--input-name URI``.

So the fleet's ``--trip-gap 10min`` and ``--rides URI`` are no special case: a user's job with an
option ``currency`` gets ``--currency EUR`` the same way, and ``speedlayer run JOB --help`` lists them.

>>> from speedlayer.pipelines.fleet import FLEET
>>> parse_job_flags(["--trip-gap", "10min", "--incident-updates", "--rides=generator://"], FLEET)
({'trip_gap': '10min', 'incident_updates': 'true'}, {'rides': 'generator://'})
"""

from __future__ import annotations

import typing
from collections.abc import Sequence

from speedlayer.core.errors import ConfigError, closest
from speedlayer.pipelines.base import Job


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _is_bool(annotation) -> bool:
    return annotation is bool or (typing.get_origin(annotation) is not None and bool in typing.get_args(annotation)
                                  and type(None) in typing.get_args(annotation) and len(typing.get_args(annotation)) == 2)


def option_flags(model) -> dict[str, tuple[str, str, bool, str]]:
    """Flag -> ("option", name, takes no value, help) for each field of a pydantic options model (None: none)."""
    flags: dict[str, tuple[str, str, bool, str]] = {}
    for name, field in (model.model_fields.items() if model else ()):
        boolean = _is_bool(field.annotation)
        default = "" if field.default is None else f" (default {str(field.default).lower() if boolean else field.default})"
        flags[_flag(name)] = ("option", name, boolean, f"{field.description or ''}{default}")
        if boolean:
            flags["--no-" + name.replace("_", "-")] = ("option", name, True, "")
    return flags


def job_flags(job: Job) -> dict[str, tuple[str, str, bool, str]]:
    """Flag -> (kind, name, takes no value, help) for the job's options ("option") and inputs ("input")."""
    flags = option_flags(job.options)
    for name, schema in job.inputs.items():
        flags[_flag(name)] = ("input", name, False, f"source URI of the {schema.name}s (its own stream)")
    return flags


def parse_job_flags(args: list[str], job: Job, run_flags: Sequence[str] = ()) -> tuple[dict[str, str], dict[str, str]]:
    """The job's options and inputs given as flags among ``args`` (what ``speedlayer run`` did not know);
    ``run_flags``, run's own, are suggested for a misspelt flag too."""
    given = parse_flags(args, job_flags(job), f"job {job.name!r}", f"speedlayer run {job.name}", run_flags)
    return given["option"], given["input"]


def parse_flags(args: list[str], flags: dict[str, tuple[str, str, bool, str]], owner: str, command: str,
                other_flags: Sequence[str] = ()) -> dict[str, dict[str, str]]:
    """Kind ("option", "input") -> name -> value of the ``flags`` given among ``args``; an unknown flag is
    a ConfigError naming ``owner``'s flags (and the closest of them or of ``other_flags``).

    >>> from speedlayer.pipelines.fraud.training import FraudTraining
    >>> parse_flags(["--events=5000"], option_flags(FraudTraining), "the training of job 'fraud'", "speedlayer train fraud")
    {'option': {'events': '5000'}, 'input': {}}
    """
    given: dict[str, dict[str, str]] = {"option": {}, "input": {}}
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        flag, _, value = arg.partition("=")
        if flag not in flags:
            known = ", ".join(f for f, spec in flags.items() if spec[3]) or "none"
            close = closest(flag, [*flags, *other_flags], cutoff=0.75)
            meant = f"did you mean {close}? " if close else ""
            raise ConfigError(f"no such option {flag} for {owner}: {meant}its own options are {known} "
                              f"(see '{command} --help')")
        kind, name, no_value, _ = flags[flag]
        if no_value:
            if value:
                raise ConfigError(f"{flag} takes no value: write {flag} or --no-{name.replace('_', '-')}")
            value = "false" if flag.startswith("--no-") else "true"
        elif not value:
            if not rest or rest[0].startswith("--"):
                raise ConfigError(f"{flag} needs a value: e.g. {flag} VALUE")
            value = rest.pop(0)
        given[kind][name] = value
    return given
