"""The exception tree: every error speedlayer raises on purpose derives from SpeedlayerError.

Messages are one line and say what to do. ``exit_code`` is what the CLI exits with: 2 for a user
mistake that can be fixed by changing the command (bad option, URI, combination), 1 otherwise.
"""


class SpeedlayerError(Exception):
    """Root of speedlayer's errors; ``str(error)`` is a one-line message that names the fix."""

    exit_code = 1


class ConfigError(SpeedlayerError):
    """A bad option, URI, duration or combination, found before anything starts."""

    exit_code = 2


class EnvironmentProblem(SpeedlayerError):
    """Something the machine lacks (Java, a connector, a server); the message says how to get it."""

    exit_code = 3


class SourceError(SpeedlayerError):
    """A source that cannot be read (missing directory, unreachable server)."""

    exit_code = 2


class SinkError(SpeedlayerError):
    """A sink that cannot be written (output of another run, unreachable server)."""

    exit_code = 2


class QueryFailedError(SpeedlayerError):
    """A streaming query stopped with an error while running."""


def closest(word: str, choices, cutoff: float = 0.6) -> str | None:
    """The choice a mistyped ``word`` most likely meant, for an error's "did you mean"; None when none is close.

    >>> closest("startingOffset", ["starting_offsets", "max_offsets_per_trigger"])
    'starting_offsets'
    """
    import difflib

    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return found[0] if found else None
