"""Positions in Redis streams: entry ids, what XINFO says of a key, counting entries, and lost ranges.

Used on the driver to plan micro-batches (``speedlayer.sources.redis_datasource``) and on the
executors to check that a planned range still holds what it held when it was planned.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from speedlayer.core.errors import SourceError

log = logging.getLogger("speedlayer.sources")

#: Walks ``(start, stop]`` of one key in pages and returns the last id and the number of entries,
#: at most ARGV[3]: the end of a bounded batch without shipping the entries to the driver.
ADVANCE_LUA = """
local last, want, got = ARGV[1], tonumber(ARGV[3]), 0
while got < want do
  local page = math.min(want - got, 10000)
  local r = redis.call('XRANGE', KEYS[1], '(' .. last, ARGV[2], 'COUNT', page)
  if #r == 0 then break end
  last = r[#r][1]
  got = got + #r
  if #r < page then break end
end
return {last, got}
"""


def entry_order(text: str) -> tuple[int, int]:
    """A stream entry id as a sortable pair.

    >>> entry_order("1700000000000-12") > entry_order("1700000000000-9")
    True
    """
    ms, _, seq = str(text).partition("-")
    return int(ms), int(seq or 0)


class StreamInfo(NamedTuple):
    """What XINFO STREAM says about one key (``added`` and ``deleted`` need Redis 7; -1 / None before)."""

    last: str  # last generated id
    added: int  # entries ever added: the position (seq) of ``last``
    length: int  # entries now in the stream
    deleted: str | None  # the highest id ever deleted (XDEL, trimming), "0-0" if none
    first: str | None = None  # the id of the first entry now in the stream; None when it is empty


def stream_infos(client, keys: list[str] | tuple[str, ...]) -> dict[str, StreamInfo | None]:
    """XINFO STREAM of every key in one round trip; None for a key that does not exist."""
    import redis

    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.xinfo_stream(key)
    infos: dict[str, StreamInfo | None] = {}
    for key, info in zip(keys, pipe.execute(raise_on_error=False)):
        if isinstance(info, redis.exceptions.ResponseError) and "no such key" in str(info).lower():
            infos[key] = None
        elif isinstance(info, Exception):
            raise info
        else:
            added = info.get("entries-added")
            first = info.get("first-entry")
            infos[key] = StreamInfo(info["last-generated-id"], int(added) if added is not None else -1,
                                    int(info["length"]), info.get("max-deleted-entry-id"), first[0] if first else None)
    return infos


def untouched_since(info: StreamInfo, entry_id: str) -> bool:
    """Whether nothing after ``entry_id`` was deleted, so ``seq`` differences count entries exactly."""
    return info.added >= 0 and info.deleted is not None and entry_order(info.deleted) <= entry_order(entry_id)


class Advancer:
    """Finds the end id of a bounded batch on the server (a Lua script), or client-side if scripts are refused."""

    def __init__(self, client):
        self.client = client
        self.script = client.register_script(ADVANCE_LUA)
        self.use_script = True

    def __call__(self, key: str, start: str, stop: str, want: int) -> tuple[str, int]:
        if want <= 0:
            return start, 0
        if self.use_script:
            import redis

            try:
                last, got = self.script(keys=[key], args=[start, stop, want])
                return str(last), int(got)
            except redis.exceptions.ResponseError as exc:
                # redis-py strips the NOPERM prefix: a user without script permission is its own class.
                refused = isinstance(exc, redis.exceptions.NoPermissionError)
                if not refused and "script" not in str(exc).lower() and "noperm" not in str(exc).lower():
                    raise
                self.use_script = False
        last, got = start, 0
        while got < want:
            size = min(want - got, 10_000)
            page = self.client.xrange(key, f"({last}", stop, count=size)
            if not page:
                break
            last, got = page[-1][0], got + len(page)
            if len(page) < size:
                break
        return last, got




class LostRange(NamedTuple):
    """Entries of ``key`` after ``after`` that were deleted before the query read them: those before
    ``before`` (or, with ``before`` None, up to ``upto``); ``entries`` of them, -1 when unknown."""

    key: str
    after: str
    before: str | None
    upto: str | None
    entries: int

    def message(self) -> str:
        """One line naming the range and the fix (the SourceError, or the warning when skipped).

        >>> LostRange("tv", "5-0", "9-0", None, 3).message()[:67]
        'Redis stream tv: the entries after 5-0 and before 9-0 (3 entries) w'
        """
        where = f"and before {self.before}" if self.before else f"up to {self.upto}"
        count = f"{self.entries} entries" if self.entries >= 0 else "how many is unknown before Redis 7"
        return (f"Redis stream {self.key}: the entries after {self.after} {where} ({count}) were deleted "
                "(XTRIM, MAXLEN, XDEL) before this query read them")

    def as_offset(self) -> dict:
        """How a skipped range is kept in the offsets log (with the batch that skipped it)."""
        return {"after": self.after, "before": self.before or f"{self.upto}+", "entries": self.entries}


def trimmed_after(key: str, info: StreamInfo | None, last_read: str, seq: int) -> LostRange | None:
    """The entries after ``last_read`` (position ``seq``) that are gone from the stream's head.

    The head moved past ``last_read`` (its first entry is newer, or the stream is empty) and entries
    were added after ``last_read``: ``entries-added`` minus ``seq`` minus ``length``, deletions the
    query saw before it read that far excluded.

    >>> trimmed_after("tv", StreamInfo("9-0", 9, 1, "8-0", "9-0"), "5-0", 5)
    LostRange(key='tv', after='5-0', before='9-0', upto=None, entries=3)
    >>> trimmed_after("tv", StreamInfo("9-0", 9, 0, "9-0", None), "5-0", 5).message()[:53]  # emptied
    'Redis stream tv: the entries after 5-0 up to 9-0 (4 e'
    """
    if info is None:
        return None
    if info.first is not None and entry_order(info.first) <= entry_order(last_read):
        return None  # the head is at or before the last entry read: nothing unread is missing at the head
    if info.first is None and entry_order(info.last) <= entry_order(last_read):
        return None  # empty, and nothing was added after the last entry read
    upto = None if info.first else info.last
    if info.added < 0:  # before Redis 7: no counts; the head moved past an entry this query read
        return LostRange(key, last_read, info.first, upto, -1) if last_read != "0-0" else None
    gone = info.added - seq - info.length
    return LostRange(key, last_read, info.first, upto, gone) if gone > 0 else None


def report_loss(lost: LostRange, fail: bool) -> None:
    """Fail with the lost range (the default), or log it as a warning and go on (``fail_on_data_loss=false``)."""
    if fail:
        raise SourceError(f"{lost.message()}: to skip them and go on, add fail_on_data_loss=false to the source URI")
    log.warning("speedlayer: %s; skipped (fail_on_data_loss=false)", lost.message())
