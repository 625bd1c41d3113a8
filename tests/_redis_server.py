"""A real ``redis-server`` for the fleet tests, on a free local port, stopped afterwards.

``.ci/run`` starts one for the whole run and names it in ``ZEROJIT_TEST_REDIS_URL`` (with its
password): :func:`redis_url` then uses it, and fails when it does not answer (CI promised a
server). Otherwise each test module starts its own; tests that stop a server mid-pull always
start their own (:func:`_start`). The fixtures skip, naming why, when the ``redis`` package or
the ``redis-server`` program is missing or the server does not answer within
:data:`START_DEADLINE` seconds: a fleet test never passes without a server.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.parse

import pytest

START_DEADLINE = 10.0  # seconds for redis-server to answer PING
SHARED_URL = os.environ.get("ZEROJIT_TEST_REDIS_URL")  # .ci/run's server, for the whole run
PASSWORD = urllib.parse.urlsplit(SHARED_URL).password if SHARED_URL else "fleet-test-secret"


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's pick for an ephemeral bind)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(tmp_path, password: str | None):
    try:
        import redis
    except ImportError:
        pytest.skip("the redis package is not installed (pip install 'zerojit[store]'): no fleet test can run")
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("no redis-server on PATH (Debian: apt-get install redis-server): no fleet test can run")
    port = free_port()
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(tmp_path)]
    if password:
        args += ["--requirepass", password]
    log = open(tmp_path / "redis.log", "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    url = f"redis://:{password}@127.0.0.1:{port}/0" if password else f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
    deadline = time.monotonic() + START_DEADLINE
    while True:
        try:
            client.ping()
            break
        except redis.RedisError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait(5)
                tail = (tmp_path / "redis.log").read_text(errors="replace")[-300:]
                pytest.skip(f"redis-server did not start within {START_DEADLINE} s on port {port}: {tail}")
            time.sleep(0.05)
    client.close()
    return proc, url, log


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """The URL (with its password) of a redis-server started for this test module, or of
    ``ZEROJIT_TEST_REDIS_URL``'s (which must answer)."""
    if SHARED_URL:
        import redis

        with redis.Redis.from_url(SHARED_URL, socket_connect_timeout=2, socket_timeout=5) as client:
            client.ping()  # a failure fails the test: .ci/run said a server is there
        yield SHARED_URL
        return
    proc, url, log = _start(tmp_path_factory.mktemp("redis"), PASSWORD)
    yield url
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    log.close()


@pytest.fixture
def flush(redis_url):
    """The server emptied before the test (tests of one module share it)."""
    import redis

    with redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=5) as client:
        client.flushall()
    return redis_url
