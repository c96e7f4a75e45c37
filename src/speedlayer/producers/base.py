"""What every ``speedlayer produce`` destination provides: check, write slices of events, close."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from speedlayer.core.uris import Uri


@dataclass(frozen=True)
class EventSlice:
    """Consecutive generated events ``first`` … ``first + len(values) - 1``: payloads and vehicle keys."""

    first: int
    values: list[bytes]
    keys: list[bytes]

    def __len__(self) -> int:
        return len(self.values)


class Destination(ABC):
    """A system ``speedlayer produce`` publishes to. ``check`` fails early with one line."""

    scheme: ClassVar[str]
    #: when paced, how many seconds of events one ``write`` takes (a file per second, 100 ms elsewhere)
    paced_slice_s: ClassVar[float] = 0.1
    #: when unpaced, the most events one ``write`` takes (None: a whole computed chunk)
    max_slice: ClassVar[int | None] = 10_000

    def __init__(self, uri: Uri):
        self.uri = uri

    def describe(self) -> str:
        return self.uri.display

    def check(self) -> None:
        """Raise SinkError/ConfigError (one line) when the destination cannot be written."""

    def open(self) -> None:
        """Connect before the first write."""

    @abstractmethod
    def write(self, events: EventSlice) -> None:
        """Publish the slice; return when the destination has acknowledged it."""

    def close(self) -> None:
        """Flush and disconnect; raise SinkError if something was not delivered."""
