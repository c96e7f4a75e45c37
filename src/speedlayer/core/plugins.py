"""Plug-ins: the jobs, sources, sinks and generator kinds that installed packages declare as entry points.

A package registers a job, a source or a sink in its own ``pyproject.toml``, the way speedlayer
registers its built-in ones::

    [project.entry-points."speedlayer.jobs"]
    orders = "shop_jobs.orders:ORDERS"          # the name a run gives: speedlayer run orders
    [project.entry-points."speedlayer.sources"]
    acme = "acme_speedlayer.source:AcmeSource"  # the URI scheme: acme://...

``registry(kind, builtins, check)`` loads one group once per process. Each plug-in is imported and
checked on its own: one that fails to import, is not the right kind of object, or whose name
another package also declares is kept as a ``Problem`` (one line: what, which package, the error,
the fix) and never breaks the others. When speedlayer's own distribution declares nothing in the
group (run from a source tree, or an install older than its entry points), ``builtins`` stand in
for its declarations.

>>> registry("job", {}, lambda name, value: None).kind  # doctest: +SKIP
'job'
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import inspect
import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from speedlayer.core.errors import SpeedlayerError

#: the entry-point group of each kind of plug-in
GROUPS = {"job": "speedlayer.jobs", "source": "speedlayer.sources", "sink": "speedlayer.sinks",
          "generator kind": "speedlayer.generator_kinds"}
#: the distribution whose plug-ins are the built-in ones (they win a name clash)
OWN = "speedlayer"

log = logging.getLogger("speedlayer.plugins")

#: says whether a loaded object is what its group holds: None if it is, else why not ("is a function, not a Job")
Check = Callable[[str, Any], "str | None"]


@dataclass(frozen=True)
class Candidate:
    """One declaration: a name, the ``module:attribute`` it points at, and the package that declares it."""

    name: str
    target: str
    package: str


@dataclass(frozen=True)
class Entry:
    """A loaded plug-in."""

    name: str
    value: Any
    package: str
    target: str

    @property
    def builtin(self) -> bool:
        return self.package == OWN


@dataclass(frozen=True)
class Problem:
    """A plug-in that is not used, in one line: what, which package, the error, what to do."""

    kind: str
    name: str
    package: str
    target: str
    error: str
    fix: str

    def __str__(self) -> str:
        of = "packages" if " and " in self.package else "package"
        return f"{self.kind} plug-in {self.name!r} of {of} {self.package} ({self.target}) {self.error}: {self.fix}"


@dataclass
class Registry:
    """The plug-ins of one kind, by name (built-ins first, in their declared order), and the problems."""

    kind: str
    entries: dict[str, Entry] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def values(self) -> dict[str, Any]:
        """Name -> loaded object."""
        return {name: entry.value for name, entry in self.entries.items()}


def import_target(target: str) -> Any:
    """The object ``module:attribute`` (the attribute may be dotted) names; import errors propagate.

    >>> import_target("speedlayer.core.modes:APPEND")
    'append'
    """
    module_name, _, attribute = target.partition(":")
    value: Any = importlib.import_module(module_name.strip())
    for part in filter(None, attribute.strip().split(".")):
        value = getattr(value, part)
    return value


def error_line(exc: BaseException) -> str:
    """An exception as ``Type: first line of its message``.

    >>> error_line(ZeroDivisionError("division by zero\\nmore"))
    'ZeroDivisionError: division by zero'
    """
    text = next((line.strip().rstrip(".") for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def declared(group: str) -> list[Candidate]:
    """Every entry point of ``group`` in the installed distributions (each distribution once)."""
    found = []
    for ep in metadata.entry_points(group=group):
        dist = getattr(ep, "dist", None)
        package = (dist.metadata.get("Name") if dist is not None else None) or "an unknown package"
        found.append(Candidate(ep.name, ep.value, package))
    return found


def load(kind: str, builtins: Mapping[str, str], check: Check, candidates: Iterable[Candidate] | None = None) -> Registry:
    """Import and check every plug-in of ``kind``; ``candidates`` default to the installed declarations.

    >>> load("job", {"x": "speedlayer.core.modes:APPEND"}, lambda n, v: None, candidates=[]).values()
    {'x': 'append'}
    """
    candidates = list(declared(GROUPS[kind]) if candidates is None else candidates)
    if not any(c.package == OWN for c in candidates):
        # speedlayer's own metadata is missing or predates its entry points: its built-ins stand in
        log.debug("speedlayer declares no %s entry points here: using its built-in %ss", GROUPS[kind], kind)
        candidates = [Candidate(name, target, OWN) for name, target in builtins.items()] + candidates
    registry = Registry(kind)
    loaded: dict[str, list[Entry]] = {}
    for candidate in candidates:
        entry = _load_one(kind, candidate, check, registry.problems)
        if entry is not None:
            loaded.setdefault(entry.name, []).append(entry)
    order = {name: i for i, name in enumerate(builtins)}
    for name in sorted(loaded, key=lambda n: (order.get(n, len(order)), loaded[n][0].package, n)):
        chosen = _settle_clash(kind, loaded[name], registry.problems)
        if chosen is not None:
            registry.entries[name] = chosen
    registry.problems.sort(key=lambda p: (p.package, p.name))
    return registry


def kind_of(value: Any) -> str:
    """What a value is, for a message that says it is not what was expected.

    >>> kind_of(print), kind_of(ValueError), kind_of(object())
    ('a builtin_function_or_method', 'the class ValueError', 'an object')
    """
    if isinstance(value, type):
        return f"the class {value.__name__}"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _load_one(kind: str, candidate: Candidate, check: Check, problems: list[Problem]) -> Entry | None:
    def problem(error: str, fix: str) -> None:
        problems.append(Problem(kind, candidate.name, candidate.package, candidate.target, error, fix))

    try:
        value = import_target(candidate.target)
    except SpeedlayerError as exc:  # it imported, and a definition in it was refused
        problem(f"was refused while importing: {exc}", f"fix it in {candidate.package}, or uninstall it")
        return None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 — a broken plug-in must not break the others
        problem(f"failed to import: {error_line(exc)}", f"fix or reinstall {candidate.package}, or uninstall it")
        return None
    reason = check(candidate.name, value)
    if reason is not None:
        problem(reason, f"point the entry point at the right object, or uninstall {candidate.package}")
        return None
    return Entry(candidate.name, value, candidate.package, candidate.target)


def _settle_clash(kind: str, entries: list[Entry], problems: list[Problem]) -> Entry | None:
    """The one entry a name goes to: the only one, else speedlayer's own; two plug-ins alone get neither."""
    if len(entries) == 1:
        return entries[0]
    own = next((e for e in entries if e.builtin), None)
    others = [e for e in entries if e is not own]
    if own is not None:
        for e in others:
            problems.append(Problem(kind, e.name, e.package, e.target, f"has the name of speedlayer's built-in {kind}",
                                    f"it is not used; rename its entry point in {e.package}'s pyproject.toml"))
        return own
    problems.append(Problem(kind, entries[0].name, " and ".join(e.package for e in entries),
                            ", ".join(e.target for e in entries),
                            f"is declared by each of them, so {'neither' if len(entries) == 2 else 'none'} is used",
                            "uninstall one of them, or rename its entry point"))
    return None


def check_subclass(name: str, value: Any, base: type, kind: str) -> str | None:
    """Why ``value`` cannot be the ``kind`` of scheme ``name`` (None: it can): a concrete subclass of ``base``
    whose ``scheme`` (or one of its ``aliases``) is the entry point's name."""
    if not (isinstance(value, type) and issubclass(value, base)):
        return f"is {kind_of(value)}, not a subclass of speedlayer's {base.__name__}"
    if inspect.isabstract(value):
        missing = ", ".join(sorted(value.__abstractmethods__))
        return f"is an abstract {kind} (it lacks {missing})"
    schemes = (getattr(value, "scheme", None), *getattr(value, "aliases", ()))
    if name not in schemes:
        return f"has scheme {getattr(value, 'scheme', None)!r}, not {name!r}: the entry-point name is the URI scheme"
    return None


_cache: dict[str, Registry] = {}
_reported: set[str] = set()


def registry(kind: str, builtins: Mapping[str, str], check: Check) -> Registry:
    """The registry of ``kind``, loaded on first use and kept for the process (``forget`` reloads)."""
    if kind not in _cache:
        _cache[kind] = load(kind, builtins, check)
    return _cache[kind]


def forget() -> None:
    """Drop the loaded registries: the next use looks at the installed packages again (e.g. after a pip install)."""
    _cache.clear()
    _reported.clear()
    importlib.invalidate_caches()


def report(found: Registry) -> None:
    """Say each problem of a registry on stderr, once per process."""
    for problem in found.problems:
        line = str(problem)
        if line not in _reported:
            _reported.add(line)
            print(f"warning: {line}", file=sys.stderr)
