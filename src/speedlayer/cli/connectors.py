"""``speedlayer sources`` and ``speedlayer sinks``: every connector (built-in and plug-in) and what it promises."""

from __future__ import annotations

from speedlayer.cli.jobs import package_label, say, say_problems
from speedlayer.core import plugins


def _summary(cls: type) -> str:
    """A connector's ``summary``, else its class name."""
    return cls.summary or cls.__name__


def _by_class(registry: plugins.Registry) -> list[tuple[list[str], plugins.Entry]]:
    """Entries grouped by the class they load: [scheme, aliases...] and the first entry, in registry order."""
    groups: dict[type, tuple[list[str], plugins.Entry]] = {}
    for name, entry in registry.entries.items():
        groups.setdefault(entry.value, ([], entry))[0].append(name)
    return list(groups.values())


def _schemes(names: list[str], suffix: str) -> str:
    aliases = f" (also {', '.join(n + suffix for n in names[1:])})" if len(names) > 1 else ""
    return names[0] + suffix + aliases


def _modes(cls: type) -> str:
    extra = [mode for mode, on in (("continuous", cls.supports_continuous),
                                   ("real-time", getattr(cls, "supports_realtime", False))) if on]
    return ", ".join(["micro-batch", *extra])


def sources_command() -> None:
    """List the sources (built-in and plug-in): URI scheme, what it reads, replay, trigger modes, package."""
    from speedlayer.sources import source_registry

    registry = source_registry()
    for names, entry in _by_class(registry):
        cls = entry.value
        replay = "replayable" if cls.fault_tolerant else "at-most-once: a restart may lose events"
        say(f"{_schemes(names, '://'):<12} {_summary(cls)} ({replay}; modes: {_modes(cls)}; "
            f"from {package_label(entry.package)})")
    say_problems(registry.problems)
    say("use one with --source URI (see 'speedlayer run --help'); write your own: docs/extending.md")


def sinks_command() -> None:
    """List the sinks (built-in and plug-in): URI scheme, guarantee, output modes, package."""
    from speedlayer.sinks import sink_registry

    registry = sink_registry()
    for names, entry in _by_class(registry):
        cls = entry.value
        say(f"{_schemes(names, ':'):<29} {_summary(cls)} ({cls.guarantee}; output modes: {', '.join(cls.modes)}; "
            f"trigger modes: {_modes(cls)}; from {package_label(entry.package)})")
    say_problems(registry.problems)
    say("use one with --sink OUTPUT=URI (see 'speedlayer run --help'); write your own: docs/extending.md")
