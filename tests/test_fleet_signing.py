"""zerojit.fleet.signing: key files in the issue's formats, signatures bound to address and build."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest

cryptography = pytest.importorskip("cryptography", reason="the cryptography package is not installed "
                                   "(pip install 'zerojit[store]'): signing cannot be tested")

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: E402

from zerojit.fleet import signing  # noqa: E402

BUILD = {"triton_version": "3.6.0", "target": "cuda:90"}
DIGESTS = {"files/k.cubin": "aa" * 32}


def test_keygen_writes_pkcs8_private_and_spki_public_pem(tmp_path):
    private, public, kid = signing.keygen(str(tmp_path / "keys"))
    priv_pem, pub_pem = open(private, "rb").read(), open(public, "rb").read()
    assert priv_pem.startswith(b"-----BEGIN PRIVATE KEY-----\n")  # PKCS#8, unencrypted
    assert pub_pem.startswith(b"-----BEGIN PUBLIC KEY-----\n")  # SubjectPublicKeyInfo
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    key = serialization.load_pem_private_key(priv_pem, password=None)
    assert isinstance(key, ed25519.Ed25519PrivateKey)
    pub = serialization.load_pem_public_key(pub_pem)
    assert pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw) == \
        key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    der = pub.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert kid == hashlib.sha256(der).hexdigest()[:16]
    with pytest.raises(signing.SigningError, match="never overwrites"):
        signing.keygen(str(tmp_path / "keys"))


def test_a_missing_key_file_is_named_as_missing_and_keygen_wants_a_folder(tmp_path):
    missing = str(tmp_path / "none.pem")
    for load, what in ((signing.load_signing_key, "signing key"), (lambda p: signing.load_verify_keys([p]), "verify key")):
        with pytest.raises(signing.SigningError) as e:
            load(missing)
        assert str(e.value) == f"{what} {missing} cannot be read: No such file or directory"  # said once, not wrapped
    (tmp_path / "a-file").write_text("")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name in ("a-file", "dangling"):
        with pytest.raises(signing.SigningError, match=f"{name} is not a folder .a file, or a link to none."):
            signing.keygen(str(tmp_path / name))
    with pytest.raises(signing.SigningError, match="an empty name was given"):
        signing.keygen("")


def test_a_signature_verifies_only_for_its_address_build_and_digests(tmp_path):
    private, public, kid = signing.keygen(str(tmp_path))
    key = signing.load_signing_key(private)
    keys = signing.load_verify_keys([public])
    record = signing.sign(key, "ab" * 32, BUILD, DIGESTS)
    assert record["key_id"] == kid
    assert signing.verify(keys, record, "ab" * 32, BUILD, DIGESTS) == kid
    for address, build, digests in [("cd" * 32, BUILD, DIGESTS), ("ab" * 32, {**BUILD, "target": "cuda:100"}, DIGESTS),
                                    ("ab" * 32, BUILD, {"files/k.cubin": "bb" * 32})]:
        with pytest.raises(signing.SignatureRefused, match=f"signature of key {kid} does not verify"):
            signing.verify(keys, record, address, build, digests)
    with pytest.raises(signing.SignatureRefused, match="unsigned"):
        signing.verify(keys, None, "ab" * 32, BUILD, DIGESTS)


def test_a_key_not_trusted_is_named(tmp_path):
    private, _, kid = signing.keygen(str(tmp_path / "farm"))
    _, other_public, other = signing.keygen(str(tmp_path / "other"))
    record = signing.sign(signing.load_signing_key(private), "ab" * 32, BUILD, DIGESTS)
    with pytest.raises(signing.SignatureRefused, match=f"signed by key {kid}, which is not trusted \\(trusted: {other}\\)"):
        signing.verify(signing.load_verify_keys([other_public]), record, "ab" * 32, BUILD, DIGESTS)
    with pytest.raises(signing.SignatureRefused, match="ZEROJIT_STORE_VERIFY_KEYS is unset"):
        signing.verify(signing.verify_keys_from_env({}), record, "ab" * 32, BUILD, DIGESTS)


def test_keys_from_the_environment(tmp_path):
    private, public1, kid1 = signing.keygen(str(tmp_path / "a"))
    _, public2, kid2 = signing.keygen(str(tmp_path / "b"))
    keys = signing.verify_keys_from_env({signing.VERIFY_KEYS_ENV: f"{public1}:{public2}"})
    assert set(keys.keys) == {kid1, kid2} and keys.paths[kid2] == public2
    assert signing.signing_key_from_env({signing.SIGNING_KEY_ENV: private}).key_id == kid1
    with pytest.raises(signing.SigningError, match="needs a signing key: set ZEROJIT_STORE_SIGNING_KEY"):
        signing.signing_key_from_env({})
    with pytest.raises(signing.SigningError, match="not a PEM public key"):
        signing.load_verify_keys([private])  # a private key where a public one belongs
