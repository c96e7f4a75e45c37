"""``module:attribute`` job references: a Job that no package declares, named by where it lives.

    speedlayer run my_package.jobs:ORDERS
    speedlayer run orders_job:ORDERS        # orders_job.py in the current directory

The current directory is searched last (after the installed packages), so a file there never
shadows an installed module. Each failure is one ConfigError that says what to fix.

>>> load_job("speedlayer.pipelines.wordcount:WORDCOUNT").name
'wordcount'
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from speedlayer.core.errors import ConfigError
from speedlayer.core.plugins import error_line, import_target, kind_of
from speedlayer.pipelines.base import Job

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
EXAMPLE = "e.g. my_package.jobs:ORDERS"


def is_reference(text: str) -> bool:
    """Whether a job name is a ``module:attribute`` reference rather than a registered name.

    >>> is_reference("fleet"), is_reference("shop.jobs:ORDERS")
    (False, True)
    """
    return ":" in text


def load_job(reference: str) -> Job:
    """The Job a ``module:attribute`` reference names.

    >>> load_job("speedlayer.pipelines.fleet:nothing")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    speedlayer.core.errors.ConfigError: job reference speedlayer.pipelines.fleet:nothing: module ... (its jobs: FLEET): ...
    """
    module_name, _, attribute = (part.strip() for part in reference.partition(":"))
    if not re.fullmatch(_DOTTED, module_name) or not re.fullmatch(_DOTTED, attribute):
        raise ConfigError(f"job reference {reference!r} is not MODULE:ATTRIBUTE ({EXAMPLE}), "
                          "nor a registered job (see 'speedlayer jobs')")
    _search_current_directory()
    module = _import(module_name, reference)
    try:
        value = import_target(f"{module_name}:{attribute}")
    except AttributeError:
        found = [name for name, v in vars(module).items() if isinstance(v, Job)]
        raise ConfigError(f"job reference {reference}: module {module_name} has no attribute {attribute!r} "
                          f"(its jobs: {', '.join(found) or 'none'}): fix the name after ':'") from None
    if not isinstance(value, Job):
        raise ConfigError(f"job reference {reference}: {attribute} is {kind_of(value)}, not a speedlayer Job: "
                          "point at a Job object (from speedlayer import Job; ORDERS = Job(...))")
    return value


def _import(module_name: str, reference: str) -> Any:
    try:
        return import_target(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(f"{exc.name}.")):
            raise ConfigError(f"job reference {reference}: no module named {exc.name!r} is installed or in the current "
                              f"directory ({os.getcwd()}): install the package that holds it, or run from the directory "
                              "that holds it") from exc
        raise ConfigError(f"job reference {reference}: module {module_name} failed while importing: {error_line(exc)}: "
                          "install what it imports") from exc
    except (Exception, SystemExit) as exc:
        raise ConfigError(f"job reference {reference}: module {module_name} failed while importing: {error_line(exc)}: "
                          "fix the module (--debug shows the traceback)") from exc


def _search_current_directory() -> None:
    """Let ``speedlayer run my_file:JOB`` find ``my_file.py`` in the current directory (searched last)."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.append(cwd)


