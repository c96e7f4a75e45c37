"""The kinds of event ``generator://?kind=NAME`` makes: entry points of group ``speedlayer.generator_kinds``.

A kind's name points at a function ``kind(seq, opts, start_ms)`` building RAW rows
(``speedlayer.sources.generator_kit`` tells what it gets and what it must keep). speedlayer
declares its own kinds in that group like any plug-in, so a package adds one the same way::

    [project.entry-points."speedlayer.generator_kinds"]
    orders = "acme_speedlayer.orders_kind:order_events"     # generator://?kind=orders

The kind is then made by ``generator://`` as a source, by ``speedlayer produce --kind orders``, and
as the default source of a job's second stream named ``orders`` in a generator run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from speedlayer.core import plugins

#: speedlayer's own kinds, as its pyproject.toml declares them (used when its metadata is missing)
BUILTIN_KINDS = {
    "vehicles": "speedlayer.pipelines.fleet.vehicle_kind:vehicle_events",
    "actions": "speedlayer.pipelines.app_actions_kind:action_events",
    "transactions": "speedlayer.pipelines.fraud.transaction_kind:transaction_events",
    "rides": "speedlayer.pipelines.fleet.ride_kind:ride_events",
    "labels": "speedlayer.pipelines.fraud.label_kind:label_events",
}


def _check(name: str, value: Any) -> str | None:
    if callable(value) and not isinstance(value, type):
        return None
    what = plugins.kind_of(value) if isinstance(value, type) else repr(value)[:60]
    return f"is {what}, not a function kind(seq, opts, start_ms) returning RAW rows"


def kind_registry() -> plugins.Registry:
    """Every registered kind by name, and the plug-ins that could not be used."""
    found = plugins.registry("generator kind", BUILTIN_KINDS, _check)
    plugins.report(found)
    return found


def kinds() -> dict[str, Callable[..., Any]]:
    """Name -> the function building RAW rows of that kind.

    >>> list(kinds())[:4]
    ['vehicles', 'actions', 'transactions', 'rides']
    """
    return kind_registry().values()
