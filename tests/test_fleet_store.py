"""zerojit.fleet.store against a real redis-server (tests/_redis_server.py starts one)."""

from __future__ import annotations

import re
import socket
import threading
import time

import pytest

pytest.importorskip("redis", reason="the redis package is not installed (pip install 'zerojit[store]'): "
                    "the store cannot be tested")

from _redis_server import PASSWORD, flush, free_port, redis_tls, redis_url  # noqa: E402,F401 (fixtures)

from zerojit.fleet.store import NAMESPACE, DeadlinePassed, RedisStore, StoreDown, StoreError, open_store  # noqa: E402


def test_put_get_round_trip_under_the_namespace(flush):
    import redis

    store = open_store(flush)
    value = bytes(range(256)) * 40
    assert store.get("ab" * 32) is None
    assert store.put_if_absent("ab" * 32, value) is True
    assert store.get("ab" * 32) == value
    assert store.exists(["ab" * 32, "cd" * 32]) == {"ab" * 32}
    with redis.Redis.from_url(flush) as raw:  # one value per entry, in zerojit's namespace only
        assert raw.keys("*") == [f"{NAMESPACE}{'ab' * 32}".encode()]
    assert sorted(store.scan()) == ["ab" * 32]
    assert store.delete(["ab" * 32, "cd" * 32]) == 1 and store.get("ab" * 32) is None


def test_two_pushers_of_one_address_one_wins_both_succeed(flush):
    stores = [open_store(flush) for _ in range(8)]
    barrier = threading.Barrier(len(stores))
    results: list[bool] = [None] * len(stores)

    def push(i):
        barrier.wait()
        results[i] = stores[i].put_if_absent("ee" * 32, f"pusher {i}".encode())

    threads = [threading.Thread(target=push, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(results) == [False] * 7 + [True]
    winner = results.index(True)
    assert stores[0].get("ee" * 32) == f"pusher {winner}".encode()  # never replaced by a later pusher


def test_the_password_is_required_and_never_shown(redis_url):
    wrong = redis_url.replace(PASSWORD, "not-the-password")
    store = open_store(wrong)
    with pytest.raises(StoreDown) as e:
        store.get("00" * 32)
    assert "not-the-password" not in str(e.value) and "***" in str(e.value)
    assert "refused its password (get: " in str(e.value)
    assert open_store(redis_url).get("00" * 32) is None  # the right one works


def test_store_down_at_start_is_storedown_at_once():
    store = open_store(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    start = time.monotonic()
    with pytest.raises(StoreDown, match=r"is down \(get:"):
        store.get("00" * 32)
    assert time.monotonic() - start < 2.0


def test_a_server_that_never_answers_passes_the_operation_deadline():
    """A socket that accepts connections (the kernel's backlog) but never replies: redis-py would
    wait forever without a deadline; with timeout=0.5 the call fails within about that."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        store = RedisStore(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", connect_timeout=0.5, timeout=0.5)
        start = time.monotonic()
        with pytest.raises(StoreDown, match="Timeout|timed out"):
            store.get("00" * 32)
        elapsed = time.monotonic() - start
    assert 0.4 < elapsed < 3.0


def test_a_server_that_answers_a_byte_at_a_time_passes_the_operation_deadline():
    """A reply that never ends (a 100 MB bulk string, one byte every 0.1 s) keeps each socket
    read under redis-py's timeout: the operation's own wall-clock deadline (timeout + connect
    timeout) ends it; end_by() ends one earlier."""
    stop = threading.Event()

    def trickle(conn):
        with conn:
            try:
                conn.recv(1024)
                conn.sendall(b"$100000000\r\n")
                while not stop.is_set():
                    conn.sendall(b"x")
                    time.sleep(0.1)
            except OSError:
                pass

    def serve(server):
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=trickle, args=(conn,), daemon=True).start()

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        threading.Thread(target=serve, args=(server,), daemon=True).start()
        store = RedisStore(f"redis://127.0.0.1:{server.getsockname()[1]}/0", connect_timeout=0.25, timeout=0.5)
        try:
            for what, op in (("get", lambda: store.get("00" * 32)), ("get", lambda: store.get_many(["00" * 32] * 3)),
                             ("exists", lambda: store.exists(["00" * 32]))):
                start = time.monotonic()
                with pytest.raises(StoreDown, match=re.escape(f"is down ({what}: no whole reply within 0.75 s)")):
                    op()
                assert 0.7 < time.monotonic() - start < 2.5
            store.end_by(time.monotonic() + 0.3)
            start = time.monotonic()
            with pytest.raises(DeadlinePassed, match=re.escape("is down (get: no whole reply within 0.")):
                store.get("00" * 32)
            assert time.monotonic() - start < 0.6
            with pytest.raises(DeadlinePassed, match=re.escape("get not tried: the caller's deadline passed")):
                store.get("00" * 32)
        finally:
            stop.set()
            server.close()


def test_a_database_the_server_lacks_is_named(flush):
    url = re.sub(r"/\d+$", "/9999", flush)
    with pytest.raises(StoreDown, match=re.escape("has no database of the URL's number")):
        open_store(url).get("00" * 32)


@pytest.mark.parametrize("url, timeout, why", [
    ("redis://[::1", 10, re.escape("store 'redis://[::1': not a URL (Invalid IPv6 URL)")),
    ("redis://:secret@[::1", 10, re.escape("store 'redis://***@[::1': not a URL")),
    ("redis://127.0.0.1:port/0", 10, "not a URL .*Port could not be cast"),
    # a password holding '/' parses as no password: all before the '@' hidden, the parser's words too
    ("redis://:SEC/RET@host:6379/0", 10, re.escape("store 'redis://***@host:6379/0': not a URL: give e.g.")),
    ("redis:/:SECRET@host/0", 10, re.escape("store ***@host/0: the database '***@host/0' is not a number")),
    ("http://127.0.0.1:6379", 10, "redis:// or rediss://"),
    ("redis://127.0.0.1:6379", 0, "positive number of seconds"),
    ("redis://127.0.0.1:6379", float("inf"), "at most 3600"),  # redis-py: OverflowError at the first call
    ("redis://127.0.0.1:6379", 1e12, "at most 3600"),
    ("redis://127.0.0.1:6379/abc", 10, "the database 'abc' is not a number"),  # redis-py: database 0, silently
])
def test_bad_store_arguments_are_user_errors(url, timeout, why):
    with pytest.raises(StoreError, match=why) as e:
        RedisStore(url, timeout=timeout)
    assert not re.search("SEC|secret", str(e.value)), e.value  # never the password, nor a piece of it


def test_another_writers_list_in_the_namespace_is_a_value_that_is_no_entry(flush):
    """redis-py answers GET of a list with WRONGTYPE: that one address reads as a value that is
    no zerojit entry (a pull refuses it, gc drops it), not as the whole store down."""
    import redis

    from zerojit.fleet.transfer import gc

    with redis.Redis.from_url(flush) as raw:
        raw.rpush(f"{NAMESPACE}{'cd' * 32}", b"x")
    store = open_store(flush)
    assert store.get("cd" * 32) == b"" and store.get("ef" * 32) is None
    result = gc(store, keep_builds=1)
    assert (result.dropped, result.foreign) == (0, 1) and result.summary().endswith("1 value that was no zerojit entry")
    assert store.exists(["cd" * 32]) == set()


def test_a_missing_password_is_named(redis_url):
    store = open_store(redis_url.replace(f":{PASSWORD}@", ""))
    with pytest.raises(StoreDown, match=r"needs a password: give it in the URL \(redis://:PASSWORD@host:port/db\)"):
        store.get("00" * 32)


def test_rediss_with_the_servers_ca_and_a_password_round_trips(redis_tls):
    """A real TLS-only redis-server (--port 0 --tls-port), its CA given in the URL's query."""
    import redis

    url = f"{redis_tls['url']}?ssl_ca_certs={redis_tls['ca']}"
    store = open_store(url)
    value = bytes(range(256)) * 8
    assert store.put_if_absent("ab" * 32, value) is True and store.get("ab" * 32) == value
    with redis.Redis.from_url(url) as raw:  # over TLS, in the namespace
        assert raw.get(f"{NAMESPACE}{'ab' * 32}") == value
        assert raw.connection_pool.connection_class.__name__ == "SSLConnection"
    wrong = open_store(url.replace(PASSWORD, "not-the-password"))
    with pytest.raises(StoreDown) as e:
        wrong.get("ab" * 32)
    assert "not-the-password" not in str(e.value) and "***" in str(e.value)


@pytest.mark.parametrize("ca", [None, "other_ca"])
def test_rediss_refuses_an_untrusted_server_certificate_as_store_down(redis_tls, ca):
    url = redis_tls["url"] + (f"?ssl_ca_certs={redis_tls[ca]}" if ca else "")
    store = RedisStore(url, connect_timeout=1, timeout=1)
    start = time.monotonic()
    with pytest.raises(StoreDown, match="CERTIFICATE_VERIFY_FAILED") as e:
        store.get("00" * 32)
    assert time.monotonic() - start < 2.0
    assert str(e.value).endswith("the server's TLS certificate is not trusted: give the CA that signed it in the "
                                 "URL, ?ssl_ca_certs=PATH") and PASSWORD not in str(e.value)


@pytest.mark.parametrize("query, why", [
    ("socket_timeout=0", "URL parameter 'socket_timeout' is not accepted"),
    ("ssl_ca_certs=/nonexistent/ca.pem", "ssl_ca_certs: no file '/nonexistent/ca.pem'"),
    ("ssl_cert_reqs=maybe", "ssl_cert_reqs='maybe': give one of required, optional, none"),
    ("nonsense", "is not name=value pairs"),
    ("password=hunter2", "rediss://127.0.0.1:6380/0?password=***: URL parameter 'password' is not accepted"),
])
def test_rediss_url_parameters_are_checked(query, why):
    with pytest.raises(StoreError, match=re.escape(why)):
        RedisStore(f"rediss://127.0.0.1:6380/0?{query}")
    with pytest.raises(StoreError, match="is a TLS parameter: use a rediss:// URL"):
        RedisStore("redis://127.0.0.1:6379/0?ssl_cert_reqs=none")
