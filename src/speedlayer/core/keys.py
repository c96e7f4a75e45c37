"""Dedup keys: the field, or the fields together, that re-sent copies of an event share.

A key is one field name, or several (a composite key: a device and its reading time, for events
that carry no id). Python jobs (``Job.dedup_key``) and job files (``dedup_key:``) check a key by
the same rules here, each showing the fix the way its user writes a key.

>>> key_fields("order_id"), key_fields(("device_id", "reading_time"))
(('order_id',), ('device_id', 'reading_time'))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

#: the key shown in the fixes: the usual composite key of events without an id
EXAMPLE = ("device_id", "reading_time")


def key_fields(key: str | Sequence[str]) -> tuple[str, ...]:
    """The fields of a dedup key, in order: one name is a key of one field.

    >>> key_fields(["device_id", "reading_time"])
    ('device_id', 'reading_time')
    """
    return (key,) if isinstance(key, str) else tuple(key)


def python_key(fields: Sequence[str]) -> str:
    """A key as a Python job declares it.

    >>> python_key(("device_id", "reading_time"))
    "Job(dedup_key=('device_id', 'reading_time'))"
    """
    return f"Job(dedup_key={fields[0]!r})" if len(fields) == 1 else f"Job(dedup_key={tuple(fields)!r})"


def key_problems(key: Sequence[str], fields: Mapping[str, bool], time_field: str, *, late: bool,
                 write: Callable[[Sequence[str]], str] = python_key) -> list[str]:
    """What is wrong with the dedup key ``key`` (its field names, in order) of events whose ``fields``
    map each name to whether it is required; each problem a phrase that follows the word dedup_key.
    ``late``: the job offers the late output; ``write`` shows a key the way the user declares one.

    >>> key_problems(("device_id", "device_id"), {"device_id": True, "t": True}, "t", late=False)
    ["names 'device_id' twice: list each field once"]
    """
    if not key:
        return [f"names no field: give the field, or the fields together, that identify an event, "
                f"e.g. {write(EXAMPLE)}, or no dedup_key"]
    problems = []
    for i, name in enumerate(key):
        if not isinstance(name, str):
            problems.append(f"holds {name!r}, which is not a field name: give field names as text")
        elif name in key[:i]:
            problems.append(f"names {name!r} twice: list each field once")
        elif name not in fields:
            problems.append(f"{name!r} is not a field of its events ({', '.join(fields)}): name the field, or the "
                            f"fields together, that identify an event, e.g. {write(EXAMPLE)}")
        elif not fields[name]:  # a null would make every event without the field a copy of one another
            problems.append(f"{name!r} is an optional field: events without it would all count as copies of one "
                            "event; make the field required or key on other fields")
    if late and tuple(key) == (time_field,):
        problems.append(f"{time_field!r} is the event time alone, which does not tell events apart (two events of one "
                        "instant would count as copies of one, in the late output too): key on the time together "
                        f"with the field that tells their sources apart, e.g. {write((EXAMPLE[0], time_field))}")
    return problems
