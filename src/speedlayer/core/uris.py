"""Source and sink URIs: ``scheme://host/path?option=value`` parsed once, secrets masked for display."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from pydantic import BaseModel, ValidationError

from speedlayer.core.errors import ConfigError, closest


@dataclass(frozen=True)
class Uri:
    """A parsed URI. ``text`` keeps what the user wrote (for messages, masked by ``display``)."""

    text: str
    scheme: str
    host: str | None
    port: int | None
    path: str
    options: Mapping[str, str] = field(default_factory=dict)
    username: str | None = None
    password: str | None = None

    @property
    def display(self) -> str:
        """The URI with any password replaced by ``***``."""
        return mask_secrets(self.text)

    def local_path(self, base: Path | None = None) -> Path:
        """The filesystem path: ``parquet:///abs`` is absolute, ``parquet:rel/dir`` is relative to cwd."""
        if not self.path:
            raise ConfigError(f"{self.display} names no path: write {self.scheme}:///absolute/dir or {self.scheme}:relative/dir")
        path = Path(self.path)
        return path if path.is_absolute() else (base or Path.cwd()) / path


def parse_uri(text: str, what: str = "URI") -> Uri:
    """Split a URI into its parts; options must not repeat.

    >>> u = parse_uri("generator://?rate=500&seed=7")
    >>> u.scheme, dict(u.options)
    ('generator', {'rate': '500', 'seed': '7'})
    >>> parse_uri("parquet:out/windows").path
    'out/windows'
    """
    if not isinstance(text, str) or ":" not in text:
        raise ConfigError(f"{what} {text!r} has no scheme: write it like {_example(what)}")
    try:
        parts = urlsplit(text)
        broken = _password_breaks_uri(parts)
    except ValueError as exc:
        if "@" not in text:
            raise ConfigError(f"{what} {mask_secrets(text)!r} is not a valid URI ({exc})") from None
        broken = True
    if broken:  # never echo it: the text holds a password we cannot find the end of
        scheme = text.split(":", 1)[0]
        raise ConfigError(f"{what} {scheme}://… does not parse: a password holding / # ? or @ must be percent-encoded "
                          "(/ as %2F, # as %23, ? as %3F, @ as %40): user:a%2Fb@host for the password a/b")
    if not parts.scheme:
        raise ConfigError(f"{what} {text!r} has no scheme: write it like {_example(what)}")
    try:  # a broker list (kafka://h1:9092,h2:9092/topic) has no single port; its source reads ``text``
        port = None if "," in parts.netloc else parts.port
    except ValueError:
        given = parts.netloc.rsplit("@", 1)[-1].rsplit(":", 1)[-1]
        raise ConfigError(f"{what} {mask_secrets(text)!r}: port {given!r} is not a number from 0 to 65535: write "
                          "host:PORT with digits only, or leave the port out for the server's default") from None
    options: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in options:
            raise ConfigError(f"{what} {mask_secrets(text)!r} gives option {key!r} twice: keep one")
        options[key] = value
    path = unquote(parts.path)
    # "scheme:rel/path" and "scheme:///abs/path" are paths; "scheme://host/path" keeps host apart.
    return Uri(
        text=text,
        scheme=parts.scheme.lower(),
        host=parts.hostname,
        port=port,
        path=path,
        options=options,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
    )


def _example(what: str) -> str:
    """URIs of the kind ``what`` names, to show the form.

    >>> _example("source URI"), _example("sink URI")
    ('generator://?rate=1000 or kafka://localhost:9092/fastcars', 'parquet:out/windows or postgresql://user@localhost/db')
    """
    if "source" in what:
        return "generator://?rate=1000 or kafka://localhost:9092/fastcars"
    if "sink" in what:
        return "parquet:out/windows or postgresql://user@localhost/db"
    return "generator://?rate=1000 or parquet:out/windows"


#: an option whose name contains one of these holds a secret (kafka.sasl.jaas.config, ssl.key.password, ...)
SECRET_WORDS = ("password", "passwd", "secret", "token", "jaas", "credential", "apikey", "api_key")
#: name segments that are secret keys themselves (``AccessKey``, ``fs.azure.sas.<container>``)
SECRET_SEGMENTS = frozenset({"accesskey", "accountkey", "privatekey", "secretkey", "masterkey", "signingkey",
                             "sharedkey", "sas"})
#: a ``key`` segment right after one of these is a secret key (``ssl.key``, ``kafka.ssl.keystore.key``,
#: ``fs.s3a.access.key``, ``fs.azure.account.key.<account>``); after anything else (``partition.key``,
#: ``kafka.key.deserializer``) or alone (``key=vehicle_id``) it names a key column or setting
KEY_QUALIFIERS = frozenset({"access", "account", "private", "secret", "ssl", "keystore", "api", "master", "signing",
                            "shared", "storage", "encryption", "client"})


def is_secret_option(name: str) -> bool:
    """Whether an option's value must never be shown: by secret words, or a qualified ``key`` segment.

    >>> is_secret_option("kafka.sasl.jaas.config"), is_secret_option("kafka.ssl.keystore.key")
    (True, True)
    >>> is_secret_option("table"), is_secret_option("key"), is_secret_option("partition.key")
    (False, False, False)
    """
    lowered = name.lower()
    if any(word in lowered for word in SECRET_WORDS):
        return True
    segments = re.split(r"[._\-]+", lowered)
    return any(seg in SECRET_SEGMENTS or (seg == "key" and i > 0 and segments[i - 1] in KEY_QUALIFIERS)
               for i, seg in enumerate(segments))


def _password_breaks_uri(parts: SplitResult) -> bool:
    """Whether a raw / # or ? in ``user:password@`` cut the URI short, leaving the ``@`` past the host.

    The ``@`` then lands in the path, the fragment or a query option's name; an ``@`` in a query
    option's value (a JAAS config naming a user) is no sign of it.
    """
    if "@" in parts.netloc or ":" not in parts.netloc:
        return False
    names = [item.split("=", 1)[0] for item in parts.query.split("&")]
    return "@" in parts.path or "@" in parts.fragment or any("@" in name for name in names)


def mask_secrets(text: str) -> str:
    """Hide the password of ``scheme://user:password@host`` and ``password=`` options.

    >>> mask_secrets("postgresql://app:s3cret@db:5432/x?password=p&table=t")
    'postgresql://app:***@db:5432/x?password=***&table=t'
    """
    try:
        parts = urlsplit(text)
        broken = _password_breaks_uri(parts)
        if "@" not in parts.netloc and "," not in parts.netloc:
            _ = parts.port  # not a number: a password holding / cut the host part short
    except ValueError:
        broken = True
    if broken:
        return f"{text.split(':', 1)[0]}://***" if "@" in text else text
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{hostport}"
    query = "&".join(
        f"{k}=***" if is_secret_option(k) else f"{k}={v}"
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    )
    rebuilt = f"{parts.scheme}:"
    if netloc or text.startswith(f"{parts.scheme}://"):
        rebuilt += f"//{netloc}"
    rebuilt += parts.path
    if query:
        rebuilt += f"?{query}"
    return rebuilt


def class_by_scheme(registry: Mapping[str, Any], text: str, what: str, examples: str,
                    unknown: str = "unknown {what} scheme {scheme!r} in {display!r}") -> tuple[Any, Uri]:
    """The registry's class for the URI's scheme, and the parsed URI (the caller, which knows the class's
    kind, makes the instance); an unknown scheme lists ``examples``.

    >>> class_by_scheme({"memory": dict}, "memory:t", "sink URI", "memory:t")[0]
    <class 'dict'>
    """
    uri = parse_uri(text, what)
    cls = registry.get(uri.scheme)
    if cls is None:
        message = unknown.format(what=what.split()[0], scheme=uri.scheme, display=uri.display)
        raise ConfigError(f"{message}: use one of {examples}")
    return cls, uri


def parse_options(model: type[BaseModel], options: Mapping[str, Any], where: str) -> Any:
    """Validate URI options against a pydantic model; the first problem becomes a one-line ConfigError.

    Unknown options are refused with the list of the ones that exist.
    """
    known = set(model.model_fields)
    for key in options:
        if key not in known:
            meant = closest(key, known)
            guess = f" (did you mean {meant!r}?)" if meant else ""
            raise ConfigError(f"{where} has no option {key!r}{guess}; known options: {', '.join(sorted(known))}")
    try:
        return model(**options)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ".".join(str(p) for p in err["loc"]) or "options"
        got = "***" if is_secret_option(name) else options.get(name, err.get("input"))
        message = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{where} option {name!r}: {message} (got {got!r})") from None
