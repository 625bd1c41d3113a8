"""The store a fleet shares: a small key-value interface, and Redis behind it.

A :class:`Store` holds one value per content address (:mod:`zerojit.fleet.entry`): a value is
written once and never changed (:meth:`Store.put_if_absent`), so two pushers of one entry both
succeed and one of them wins, and an evicted value takes its whole entry with it (never half of
one). The interface is kept this small so that an S3-compatible object store can follow.

:class:`RedisStore` talks to a ``redis-server`` through ``redis-py``. redis-py waits forever
unless told otherwise, so every connection has a deadline to connect (2 s by default) and one
per operation (10 s): a passed deadline, a refused connection or a server that goes away raises
:class:`StoreDown`, which a caller turns into "compile locally" in one line. Values live under
``zerojit:v1:<address>``, zerojit's own namespace.
"""

from __future__ import annotations

import abc
import math
import os
import ssl
import threading
import time
import urllib.parse
from typing import Any, Iterable, Iterator

__all__ = ["Store", "StoreDown", "DeadlinePassed", "StoreError", "RedisStore", "open_store", "NAMESPACE",
           "CONNECT_TIMEOUT", "OPERATION_TIMEOUT", "MAX_TIMEOUT", "timeout_ok"]

NAMESPACE = "zerojit:v1:"
CONNECT_TIMEOUT = 2.0  #: seconds to connect to the store (issue 31: redis-py has no deadline unless told)
OPERATION_TIMEOUT = 10.0  #: seconds for one operation's reply
MAX_TIMEOUT = 3600.0  #: the longest deadline taken (a longer one is no deadline; inf overflows the socket's)
_SCAN_BATCH = 500  # keys per SCAN / EXISTS round trip
_GET_BATCH = 16  # values per pipelined GET round trip (a value is a cache entry: ~100 KB, a few MB with IR)
# the URL query parameters a rediss:// URL may carry (redis-py's SSLConnection arguments, passed
# through by redis.from_url); every other one is refused, as redis-py lets the query override any
# argument, the deadlines included
TLS_PARAMETERS = {"ssl_ca_certs": "file", "ssl_ca_path": "folder", "ssl_certfile": "file", "ssl_keyfile": "file",
                  "ssl_cert_reqs": ("required", "optional", "none"), "ssl_check_hostname": ("true", "false")}


class StoreError(ValueError):
    """The store is given wrongly (a URL of another scheme, a missing package): a user error,
    the message says what to give instead."""


class StoreDown(ConnectionError):
    """The store cannot be reached or did not answer within its deadline; the message names
    the store (never its password) and what failed. Callers compile locally instead."""


class DeadlinePassed(StoreDown):
    """An operation reached the deadline a caller set (:meth:`Store.end_by`) before its own."""


class Store(abc.ABC):
    """A map from content address (a hex string) to one immutable value (bytes)."""

    #: the store as messages name it (a URL without its password)
    name: str = "store"

    @abc.abstractmethod
    def get(self, address: str) -> bytes | None:
        """The value at ``address``, or None when there is none (never stored, or evicted).

        Raises:
            StoreDown: the store cannot be reached in time."""

    def get_many(self, addresses: list[str]) -> list[bytes | None]:
        """The values at ``addresses``, in order (None where there is none); a store may fetch
        them in fewer round trips than one per address.

        Raises:
            StoreDown: the store cannot be reached in time."""
        return [self.get(a) for a in addresses]

    @abc.abstractmethod
    def put_if_absent(self, address: str, value: bytes) -> bool:
        """Store ``value`` at ``address`` unless a value is there already; True when this call
        stored it. A value is never replaced: another pusher's entry of the same address is the
        same entry.

        Raises:
            StoreDown: the store cannot be reached in time."""

    @abc.abstractmethod
    def exists(self, addresses: Iterable[str]) -> set[str]:
        """Which of ``addresses`` hold a value now (one may still be evicted before it is read).

        Raises:
            StoreDown: the store cannot be reached in time."""

    @abc.abstractmethod
    def scan(self) -> Iterator[str]:
        """Every address that holds a value (for garbage collection), in no particular order.

        Raises:
            StoreDown: the store cannot be reached in time."""

    @abc.abstractmethod
    def delete(self, addresses: Iterable[str]) -> int:
        """Remove the values of ``addresses``; returns how many were there.

        Raises:
            StoreDown: the store cannot be reached in time."""

    def end_by(self, deadline: float | None) -> None:
        """Make every later operation end by ``deadline`` (a :func:`time.monotonic` value; None:
        each its own deadline only), raising :class:`DeadlinePassed` past it: a caller's own
        deadline, e.g. ``store wait --timeout``. A store without deadlines of its own ignores it."""

    def close(self) -> None:
        """Release connections (a no-op where there are none)."""


def _display(url: str) -> str:
    """``url`` with its password replaced by ``***`` (messages never carry it), also one given
    as a query parameter (refused, but named); of a string that is no URL, all before its last
    ``@`` but the scheme."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        parts = None
    if parts is None and "@" not in url:
        return url
    if "@" in url and (parts is None or parts.password is None):
        # no URL, or one whose password holds '/', '#' or '?' (no userinfo parsed): hide all before the last '@'
        scheme, sep, rest = url.partition("://")
        return f"{scheme}{sep}***@{rest.rsplit('@', 1)[-1]}" if sep else f"***@{url.rsplit('@', 1)[-1]}"
    if "password" in parts.query:
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        parts = parts._replace(query="&".join(f"{k}={'***' if 'password' in k else v}" for k, v in query))
    if parts.password is None:
        return urllib.parse.urlunsplit(parts)
    netloc = parts.netloc.rsplit("@", 1)
    user = parts.username or ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[-1]}"))


def _check_query(url: str, display: str) -> None:
    """Refuse a URL query parameter other than :data:`TLS_PARAMETERS` (or one on ``redis://``),
    a value not among its choices, or a file or folder that is not there."""
    parts = urllib.parse.urlsplit(url)
    try:
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise StoreError(f"store {display}: its query {parts.query!r} is not name=value pairs") from None
    for name, value in query:
        kind = TLS_PARAMETERS.get(name)
        if kind is None:
            raise StoreError(f"store {display}: URL parameter {name!r} is not accepted (accepted: "
                             f"{', '.join(TLS_PARAMETERS)}; deadlines: --connect-timeout / --op-timeout)")
        if parts.scheme != "rediss":
            raise StoreError(f"store {display}: {name} is a TLS parameter: use a rediss:// URL")
        if isinstance(kind, tuple):
            if value.lower() not in kind:
                raise StoreError(f"store {display}: {name}={value!r}: give one of {', '.join(kind)}")
        elif not (os.path.isfile if kind == "file" else os.path.isdir)(value):
            raise StoreError(f"store {display}: {name}: no {kind} {value!r}")


def _tls_hint(error: BaseException) -> str:
    """A hint for a connection refused for its certificate (redis-py's message is OpenSSL's)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return ("; the server's TLS certificate is not trusted: give the CA that signed it in the URL, "
                    "?ssl_ca_certs=PATH")
        seen = seen.__cause__ or seen.__context__
    return ""


class RedisStore(Store):
    """A :class:`Store` on a Redis server (``redis://`` or ``rediss://`` for TLS, a password in
    the URL: ``redis://:PASSWORD@host:6379/0``). A ``rediss://`` URL may carry the TLS
    parameters of :data:`TLS_PARAMETERS` as its query (redis-py's names), e.g.
    ``rediss://:PASSWORD@host:6380/0?ssl_ca_certs=/etc/zerojit/redis-ca.pem``; without
    ``ssl_ca_certs`` the server's certificate must be trusted by the system's CAs.

    Args:
        url: the server's URL.
        connect_timeout: seconds to connect (redis-py's ``socket_connect_timeout``).
        timeout: seconds for each operation's reply: redis-py's ``socket_timeout`` bounds each
            read, and each operation as a whole ends within ``timeout + connect_timeout`` wall
            seconds (its connect included): past that its connection is cut, so a server that
            sends a reply a byte at a time cannot hold an operation for longer. (The cut closes
            every connection of this store's pool: another thread's operation then in flight
            on the same store fails as down too.)

    Raises:
        StoreError: not a ``redis://`` / ``rediss://`` URL, a URL parameter not accepted (or
            a TLS one on ``redis://``, a file it names missing), a timeout not positive, or the
            ``redis`` package missing (install ``zerojit[store]``).

    Connecting is lazy: the first operation connects, and raises :class:`StoreDown` if it cannot.
    """

    def __init__(self, url: str, *, connect_timeout: float = CONNECT_TIMEOUT,
                 timeout: float = OPERATION_TIMEOUT) -> None:
        try:
            scheme = urllib.parse.urlsplit(url).scheme
            urllib.parse.urlsplit(url).port  # (a port that is no number raises here, not at the first operation)
        except ValueError as e:  # (its words may quote a piece of the password: not said where they quote)
            why = "" if "@" in url and "'" in str(e) else f" ({e})"
            raise StoreError(f"store {_display(url)!r}: not a URL{why}: give e.g. "
                             "redis://:PASSWORD@host:6379/0") from None
        if scheme not in ("redis", "rediss"):
            raise StoreError(f"store {_display(url)!r}: give a redis:// or rediss:// URL "
                             "(e.g. redis://:PASSWORD@host:6379/0)")
        _check_query(url, _display(url))
        for what, value in (("connect timeout", connect_timeout), ("timeout", timeout)):
            if not timeout_ok(value):
                raise StoreError(f"store {_display(url)}: the {what} must be a positive number of seconds, at "
                                 f"most {MAX_TIMEOUT:g}, not {value!r}")
        path = urllib.parse.urlsplit(url).path.strip("/")
        if path and not path.isdigit():  # redis-py would take database 0 silently
            raise StoreError(f"store {_display(url)}: the database {_display(path)!r} is not a number (e.g. "
                             "redis://host:6379/0)")
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise StoreError("the store needs the redis package: pip install 'zerojit[store]'") from None
        self._redis = redis
        self.name = _display(url)
        self._limit = timeout + connect_timeout  # an operation's wall seconds, its connect included
        self._until: float | None = None  # end_by's deadline (time.monotonic)
        try:
            # no retries: a deadline passed is the "store down" path at once, not three times later
            self._client = redis.Redis.from_url(url, socket_connect_timeout=connect_timeout, socket_timeout=timeout,
                                                retry_on_timeout=False, retry=Retry(NoBackoff(), 0))
        except ValueError as e:
            raise StoreError(f"store {self.name}: {e}") from None

    def end_by(self, deadline: float | None) -> None:
        self._until = deadline

    def _cut(self, cut: threading.Event) -> None:
        # the deadline's timer thread: closing the sockets ends a read blocked in another thread
        cut.set()
        self._client.connection_pool.disconnect(inuse_connections=True)

    def _call(self, what: str, fn, *args, **kwargs):
        """``fn(*args, **kwargs)``, one operation, within its wall-clock deadline (redis-py's
        socket timeout bounds each read only); redis-py's errors as :class:`StoreDown`."""
        limit = self._limit if self._until is None else min(self._limit, self._until - time.monotonic())
        if limit <= 0:
            raise DeadlinePassed(f"store {self.name}: {what} not tried: the caller's deadline passed")
        cut = threading.Event()
        timer = threading.Timer(limit, self._cut, (cut,))
        timer.daemon = True
        timer.start()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if cut.is_set():  # (a read on a socket closed under it fails in any of several ways)
                down = DeadlinePassed if limit < self._limit else StoreDown
                raise down(f"store {self.name} is down ({what}: no whole reply within {limit:.3g} s)") from None
            if not isinstance(e, (self._redis.RedisError, OSError)):
                raise
            # redis-py words a missing password as a connection error or a command error
            if any(s in str(e) for s in ("NOAUTH", "HELLO must be called", "Authentication required")):
                raise StoreDown(f"store {self.name} needs a password: give it in the URL "
                                "(redis://:PASSWORD@host:port/db)") from None
            if isinstance(e, self._redis.AuthenticationError) or "WRONGPASS" in str(e):
                raise StoreDown(f"store {self.name} refused its password ({what}: {e})") from None
            if "DB index is out of range" in str(e):  # (as a wrong password: no store to use, compile locally)
                raise StoreDown(f"store {self.name} has no database of the URL's number ({what}: {e})") from None
            if isinstance(e, (self._redis.ConnectionError, self._redis.TimeoutError, OSError)):
                raise StoreDown(f"store {self.name} is down ({what}: {e}){_tls_hint(e)}") from None
            # a full server (OOM), another writer's value of another type: no store to use either
            raise StoreDown(f"store {self.name} refused {what}: {e}") from None
        finally:
            timer.cancel()

    def get(self, address: str) -> bytes | None:
        try:
            return self._call("get", self._client.get, NAMESPACE + address)
        except StoreDown as e:
            if "WRONGTYPE" in str(e):  # another writer's list or hash in the namespace: a value that is no entry
                return b""
            raise

    def get_many(self, addresses: list[str]) -> list[bytes | None]:
        """One pipelined round trip per :data:`_GET_BATCH` addresses; another writer's value of
        another type reads as ``b""`` (a value that is no entry), as in :meth:`get`."""
        out: list[bytes | None] = []
        for start in range(0, len(addresses), _GET_BATCH):
            pipe = self._client.pipeline(transaction=False)
            for a in addresses[start:start + _GET_BATCH]:
                pipe.get(NAMESPACE + a)
            got = self._call("get", pipe.execute, raise_on_error=False)
            out += [b"" if isinstance(v, self._redis.ResponseError) else v for v in got]
        return out

    def put_if_absent(self, address: str, value: bytes) -> bool:
        return bool(self._call("put", self._client.set, NAMESPACE + address, value, nx=True))

    def exists(self, addresses: Iterable[str]) -> set[str]:
        addresses = list(dict.fromkeys(addresses))
        found: set[str] = set()
        for start in range(0, len(addresses), _SCAN_BATCH):
            batch = addresses[start:start + _SCAN_BATCH]
            pipe = self._client.pipeline(transaction=False)
            for a in batch:
                pipe.exists(NAMESPACE + a)
            found.update(a for a, n in zip(batch, self._call("exists", pipe.execute)) if n)
        return found

    def scan(self) -> Iterator[str]:
        cursor = 0
        while True:
            cursor, keys = self._call("scan", self._client.scan, cursor, match=NAMESPACE + "*", count=_SCAN_BATCH)
            for k in keys:
                yield k.decode()[len(NAMESPACE):]
            if cursor == 0:
                return

    def delete(self, addresses: Iterable[str]) -> int:
        keys = [NAMESPACE + a for a in addresses]
        return sum(self._call("delete", self._client.delete, *keys[i:i + _SCAN_BATCH])
                   for i in range(0, len(keys), _SCAN_BATCH))

    def close(self) -> None:
        self._client.close()


def timeout_ok(seconds: Any) -> bool:
    """True for a store timeout zerojit takes: a finite number of seconds in ``(0, MAX_TIMEOUT]``."""
    return isinstance(seconds, (int, float)) and 0 < seconds <= MAX_TIMEOUT and math.isfinite(seconds)


def open_store(url: str, *, connect_timeout: float = CONNECT_TIMEOUT, timeout: float = OPERATION_TIMEOUT) -> Store:
    """The store at ``url`` (``redis://``, ``rediss://``; other schemes may follow).

    Raises:
        StoreError: a URL of no known scheme, a bad timeout, a missing package.
    """
    return RedisStore(url, connect_timeout=connect_timeout, timeout=timeout)
