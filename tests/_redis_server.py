"""A real ``redis-server`` for the fleet tests, on a free local port, stopped afterwards.

``.ci/run`` starts one for the whole run and names it in ``ZEROJIT_TEST_REDIS_URL`` (with its
password): :func:`redis_url` then uses it, and fails when it does not answer (CI promised a
server). Otherwise each test module starts its own; tests that stop a server mid-pull always
start their own (:func:`_start`). The fixtures skip, naming why, when the ``redis`` package or
the ``redis-server`` program is missing or the server does not answer within
:data:`START_DEADLINE` seconds: a fleet test never passes without a server. :func:`redis_tls`
serves TLS only (``rediss://``), with a CA and a server certificate made here with
``cryptography``; it skips naming why when the server was built without TLS.
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


def make_ca(folder, name: str):
    """A self-signed CA (EC P-256, valid for a day) written as ``<name>-ca.pem``; returns
    ``(path, key, certificate)``."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"zerojit test CA {name}")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    path = folder / f"{name}-ca.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, key, cert


def make_server_cert(folder, ca_key, ca_cert):
    """A server certificate for 127.0.0.1 and localhost signed by the CA; returns the paths of
    ``(certificate, private key)``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_path, key_path = folder / "server.pem", folder / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def _start(tmp_path, password: str | None, tls: tuple | None = None):
    """Start a redis-server in ``tmp_path``; ``tls``: ``(CA, certificate, key)`` paths to serve
    TLS only. Returns ``(process, URL, log file)``; skips naming why if none answers."""
    try:
        import redis
    except ImportError:
        pytest.skip("the redis package is not installed (pip install 'zerojit[store]'): no fleet test can run")
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("no redis-server on PATH (Debian: apt-get install redis-server): no fleet test can run")
    port = free_port()
    args = [exe, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]
    if tls:  # TLS only; clients need no certificate of their own
        ca, cert, key = tls
        args += ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
                 "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no"]
    else:
        args += ["--port", str(port)]
    if password:
        args += ["--requirepass", password]
    log = open(tmp_path / "redis.log", "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    scheme = "rediss" if tls else "redis"
    url = f"{scheme}://:{password}@127.0.0.1:{port}/0" if password else f"{scheme}://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5,
                                  **({"ssl_ca_certs": str(tls[0])} if tls else {}))
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
                if tls and proc.returncode is not None:
                    pytest.skip(f"{exe} cannot serve TLS (built without it? Debian's package has it): {tail}")
                pytest.skip(f"redis-server did not start within {START_DEADLINE} s on port {port}: {tail}")
            time.sleep(0.05)
    client.close()
    return proc, url, log


def _stop(proc, log) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    log.close()


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
    _stop(proc, log)


@pytest.fixture(scope="module")
def redis_tls(tmp_path_factory):
    """A redis-server serving TLS only, with a password: ``{"url": rediss URL with the password,
    "ca": its CA's PEM file, "other_ca": another CA's (that signed nothing of it)}``."""
    pytest.importorskip("cryptography", reason="the cryptography package is not installed: no test certificates")
    folder = tmp_path_factory.mktemp("redis-tls")
    ca, ca_key, ca_cert = make_ca(folder, "server")
    other_ca = make_ca(folder, "other")[0]
    proc, url, log = _start(folder, PASSWORD, (ca, *make_server_cert(folder, ca_key, ca_cert)))
    yield {"url": url, "ca": ca, "other_ca": other_ca}
    _stop(proc, log)


@pytest.fixture
def flush(redis_url):
    """The server emptied before the test (tests of one module share it)."""
    import redis

    with redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=5) as client:
        client.flushall()
    return redis_url
