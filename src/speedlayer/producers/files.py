"""Publish to a landing directory: ``files:///landing`` (or ``files:relative/dir``), JSON lines.

One file per write (a chunk when unpaced, a second of events when paced), written under a
hidden temporary name and renamed into place, so Spark's file source never sees half a file.
Names are ``events-<seed>-<start ms>-<first event>.jsonl``: producing the same events again
rewrites the same files with the same content.
"""

from __future__ import annotations

import os

from speedlayer.core.errors import ConfigError, SinkError
from speedlayer.core.uris import Uri, parse_options
from speedlayer.producers.base import Destination, EventSlice
from speedlayer.sources.base import snake_case_options
from speedlayer.sources.files import FilesOptions


class FilesDestination(Destination):
    scheme = "files"
    paced_slice_s = 1.0
    max_slice = None

    def __init__(self, uri: Uri):
        super().__init__(uri)
        if uri.host:
            raise ConfigError(f"{uri.display}: write files:///absolute/dir or files:relative/dir (no host part)")
        options = parse_options(FilesOptions, snake_case_options(uri.options, "files://"), "files://")
        if options.format != "json":
            raise ConfigError(f"{uri.display}: speedlayer produce writes JSON lines; drop format={options.format}")
        self.path = uri.local_path()
        self.prefix = "events"

    def describe(self) -> str:
        return f"files:{self.path} (JSON lines)"

    def name_files(self, seed: int, start_ms: int) -> None:
        """Name this run's files after the generator's seed and start."""
        self.prefix = f"events-{seed}-{start_ms}"

    def check(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise SinkError(f"{self.path} is a file, not a directory: give a landing directory")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SinkError(f"cannot create landing directory {self.path}: {exc.strerror}") from None
        if not os.access(self.path, os.W_OK):
            raise SinkError(f"landing directory {self.path} is not writable: fix its permissions or choose another")

    def open(self) -> None:
        self.check()  # creates the directory

    def write(self, events: EventSlice) -> None:
        name = f"{self.prefix}-{events.first:012d}.jsonl"
        temporary = self.path / f".{name}.tmp"
        try:
            with open(temporary, "wb") as out:
                out.write(b"\n".join(events.values))
                out.write(b"\n")
            os.replace(temporary, self.path / name)
        except OSError as exc:
            raise SinkError(f"cannot write {self.path / name}: {exc.strerror}") from None
