"""Signed store entries: Ed25519 keys, signatures, and the keys a node trusts.

A shared store is a code-injection path: a cubin from it runs on every GPU of the fleet. So every
entry is signed by the farm that pushed it, and a node installs only entries signed by a key it
trusts; nodes hold public keys only. Ed25519 through ``cryptography`` (the ``zerojit[store]``
extra).

* :func:`keygen` writes a pair: ``zerojit-store.key`` (PKCS#8 PEM, unencrypted, mode 0600) and
  ``zerojit-store.pub`` (SubjectPublicKeyInfo PEM). A key's id (:func:`key_id`) is the first 16
  hex digits of the SHA-256 of its public key (DER), so rotated keys are told apart in messages.
* Pushing signs with the private key in ``ZEROJIT_STORE_SIGNING_KEY`` (:func:`signing_key_from_env`;
  without it a push is refused). Pulling trusts the public keys of the files in
  ``ZEROJIT_STORE_VERIFY_KEYS`` (``:``-separated; several for rotation: :func:`verify_keys_from_env`).
* The signature covers the entry's content address, its build identity and the SHA-256 of each of
  its files (:func:`signed_message`), so a signed entry cannot be replayed under another address
  or build, nor with other files.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["SigningError", "SignatureRefused", "SigningKey", "VerifyKeys", "keygen", "key_id", "load_signing_key",
           "load_verify_keys", "signing_key_from_env", "verify_keys_from_env", "signed_message", "sign", "verify",
           "SIGNING_KEY_ENV", "VERIFY_KEYS_ENV", "DOMAINS", "PRIVATE_NAME", "PUBLIC_NAME"]

SIGNING_KEY_ENV = "ZEROJIT_STORE_SIGNING_KEY"
VERIFY_KEYS_ENV = "ZEROJIT_STORE_VERIFY_KEYS"
PRIVATE_NAME = "zerojit-store.key"
PUBLIC_NAME = "zerojit-store.pub"
# the signed message's first field: a signature means this kind of value and nothing else
DOMAINS = {"entry": "zerojit-store-entry-v1", "tuning": "zerojit-store-tuning-v1"}


class SigningError(ValueError):
    """A key cannot be made, read or used (no such file, not an Ed25519 PEM key, no key given, the
    ``cryptography`` package missing): a user error, the message names the file or variable."""


class SignatureRefused(ValueError):
    """An entry's signature is missing, made by a key not trusted, or does not verify; the
    message names the key id and the reason."""


def _crypto():
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise SigningError("signed store entries need the cryptography package: pip install 'zerojit[store]'") from None
    return serialization, ed25519, InvalidSignature


def key_id(public_key: Any) -> str:
    """The id of an Ed25519 public key: the first 16 hex digits of the SHA-256 of its DER
    SubjectPublicKeyInfo (the bytes of the ``.pub`` file's PEM body)."""
    serialization, _, _ = _crypto()
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()[:16]


@dataclass(frozen=True)
class SigningKey:
    """A private key to sign with, its id and the file it came from."""

    private: Any
    key_id: str
    path: str


@dataclass(frozen=True)
class VerifyKeys:
    """The trusted public keys, by key id (and the file each came from, for messages)."""

    keys: Mapping[str, Any]
    paths: Mapping[str, str]


def keygen(folder: str) -> tuple[str, str, str]:
    """Write a new Ed25519 key pair into ``folder`` (created if missing); returns ``(private
    path, public path, key id)``. The private key is PKCS#8 PEM, unencrypted, mode 0600 (keep it
    on the farm only); the public key SubjectPublicKeyInfo PEM (give it to every node).

    Raises:
        SigningError: a key file is there already (never overwritten), ``folder`` is empty or a
            file, or it cannot be written.
    """
    serialization, ed25519, _ = _crypto()
    if not folder:
        raise SigningError("give the folder to write the key pair into (an empty name was given)")
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise SigningError(f"{folder} is not a folder (a file, or a link to none): give the folder to write the key "
                           "pair into")
    private_path, public_path = os.path.join(folder, PRIVATE_NAME), os.path.join(folder, PUBLIC_NAME)
    for path in (private_path, public_path):
        if os.path.lexists(path):
            raise SigningError(f"{path} exists already: keygen never overwrites a key; give an empty folder")
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        os.makedirs(folder, exist_ok=True)
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(private)
        with open(public_path, "xb") as f:
            f.write(public)
    except OSError as e:
        raise SigningError(f"cannot write the key pair into {folder}: {e.strerror or e}") from None
    return private_path, public_path, key_id(key.public_key())


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise SigningError(f"{what} {path} cannot be read: {e.strerror or e}") from None


def load_signing_key(path: str) -> SigningKey:
    """The Ed25519 private key of the PKCS#8 PEM file ``path`` (as :func:`keygen` writes it).

    Raises:
        SigningError: no such file, or not an unencrypted Ed25519 private key in PEM.
    """
    serialization, ed25519, _ = _crypto()
    data = _read(path, "signing key")  # (its SigningError is a ValueError: read outside the try below)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise SigningError(f"signing key {path} is not an unencrypted PEM private key ({e}): give the "
                           f"{PRIVATE_NAME} that zerojit store keygen wrote") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise SigningError(f"signing key {path} is a {type(key).__name__}, not an Ed25519 key: make one with "
                           "zerojit store keygen")
    return SigningKey(key, key_id(key.public_key()), path)


def load_verify_keys(paths: list[str]) -> VerifyKeys:
    """The Ed25519 public keys of the SubjectPublicKeyInfo PEM files ``paths``, by key id.

    Raises:
        SigningError: a file missing, or not an Ed25519 public key in PEM.
    """
    serialization, ed25519, _ = _crypto()
    keys: dict[str, Any] = {}
    where: dict[str, str] = {}
    for path in paths:
        data = _read(path, "verify key")  # (its SigningError is a ValueError: read outside the try below)
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, TypeError) as e:
            raise SigningError(f"verify key {path} is not a PEM public key ({e}): give the {PUBLIC_NAME} that "
                               "zerojit store keygen wrote") from None
        if not isinstance(key, ed25519.Ed25519PublicKey):
            raise SigningError(f"verify key {path} is a {type(key).__name__}, not an Ed25519 key")
        keys[key_id(key)] = key
        where[key_id(key)] = path
    return VerifyKeys(keys, where)


def signing_key_from_env(environ: Mapping[str, str] = os.environ) -> SigningKey:
    """The key named by ``ZEROJIT_STORE_SIGNING_KEY``.

    Raises:
        SigningError: the variable unset or empty (pushing is refused: entries are always
            signed), or its file not a usable key.
    """
    path = environ.get(SIGNING_KEY_ENV, "")
    if not path:
        raise SigningError(f"pushing to a store needs a signing key: set {SIGNING_KEY_ENV} to the private key file "
                           "(zerojit store keygen -o DIR writes one)")
    return load_signing_key(path)


def verify_keys_from_env(environ: Mapping[str, str] = os.environ) -> VerifyKeys:
    """The keys of the files in ``ZEROJIT_STORE_VERIFY_KEYS`` (``:``-separated); none when it is
    unset, and then every entry is refused (there is no unsigned mode).

    Raises:
        SigningError: a file missing or not an Ed25519 public key.
    """
    return load_verify_keys([p for p in environ.get(VERIFY_KEYS_ENV, "").split(":") if p])


def signed_message(address: str, build: Mapping[str, Any], digests: Mapping[str, str], kind: str = "entry") -> bytes:
    """The bytes a signature covers: canonical JSON (sorted keys, no spaces) of the domain tag
    of the value's ``kind`` (:data:`DOMAINS`: a cache entry, a tuning file), the content
    address, the build identity and every file's SHA-256."""
    return json.dumps({"domain": DOMAINS[kind], "address": address, "build": build, "digests": dict(digests)},
                      sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def sign(key: SigningKey, address: str, build: Mapping[str, Any], digests: Mapping[str, str],
         kind: str = "entry") -> dict[str, str]:
    """The signature record of a value of ``kind`` (:data:`DOMAINS`): ``{"key_id": ..., "signature": base64}``."""
    signature = key.private.sign(signed_message(address, build, digests, kind))
    return {"key_id": key.key_id, "signature": base64.b64encode(signature).decode("ascii")}


def verify(keys: VerifyKeys, record: Any, address: str, build: Mapping[str, Any], digests: Mapping[str, str],
           kind: str = "entry") -> str:
    """Check the signature record ``record`` of a value of ``kind`` (:data:`DOMAINS`); returns
    the key id that signed it.

    Raises:
        SignatureRefused: no signature, a key not among ``keys`` (named), or a signature that
            does not verify with it (the entry was altered, or signed for another address or build).
    """
    _, _, invalid = _crypto()
    if not isinstance(record, dict) or not isinstance(record.get("key_id"), str) \
            or not isinstance(record.get("signature"), str):
        raise SignatureRefused("unsigned entry (no signature record)")
    kid = record["key_id"]
    key = keys.keys.get(kid)
    if key is None:
        trusted = ", ".join(sorted(keys.keys)) or f"none: {VERIFY_KEYS_ENV} is unset"
        raise SignatureRefused(f"signed by key {kid}, which is not trusted (trusted: {trusted})")
    try:
        key.verify(base64.b64decode(record["signature"], validate=True), signed_message(address, build, digests, kind))
    except (invalid, ValueError):
        raise SignatureRefused(f"the signature of key {kid} does not verify (altered, or signed for another "
                               "address or build)") from None
    return kid
