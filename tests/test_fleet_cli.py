"""``zerojit store keygen|push``: one line and exit 2 for a user error, 1 for a store that is down."""

from __future__ import annotations

import re
import time

import pytest

pytest.importorskip("redis", reason="the redis package is not installed (pip install 'zerojit[store]'): "
                    "the store cannot be tested")
pytest.importorskip("cryptography", reason="the cryptography package is not installed (pip install "
                    "'zerojit[store]'): the store commands cannot be tested")

from typer.testing import CliRunner  # noqa: E402

from _redis_server import flush, free_port, redis_url  # noqa: E402,F401 (fixtures)

from zerojit.cli import app  # noqa: E402
from zerojit.fleet import signing  # noqa: E402


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env=env)


def one_line(result, status: int, text: str) -> None:
    lines = result.output.strip().splitlines()
    assert (result.exit_code, len(lines)) == (status, 1), (result.exit_code, result.output, result.exception)
    assert lines[0].startswith(text), lines[0]


def test_keygen_writes_a_pair_and_never_overwrites_it(tmp_path):
    result = invoke("store", "keygen", "-o", str(tmp_path / "keys"))
    assert result.exit_code == 0, result.output
    kid = signing.load_signing_key(str(tmp_path / "keys" / signing.PRIVATE_NAME)).key_id
    assert set(signing.load_verify_keys([str(tmp_path / "keys" / signing.PUBLIC_NAME)]).keys) == {kid}
    assert result.output.startswith(f"key {kid}: private {tmp_path / 'keys' / signing.PRIVATE_NAME}")
    one_line(invoke("store", "keygen", "-o", str(tmp_path / "keys")), 2,
             f"zerojit store keygen: {tmp_path / 'keys' / signing.PRIVATE_NAME} exists already")


def test_push_without_a_signing_key_is_refused(tmp_path):
    one_line(invoke("store", "push", "--store", "redis://127.0.0.1:6379/0", env={signing.SIGNING_KEY_ENV: ""}), 2,
             "zerojit store push: pushing to a store needs a signing key: set ZEROJIT_STORE_SIGNING_KEY")
    public = signing.keygen(str(tmp_path))[1]
    one_line(invoke("store", "push", "--store", "redis://127.0.0.1:6379/0", env={signing.SIGNING_KEY_ENV: public}), 2,
             f"zerojit store push: signing key {public} is not an unencrypted PEM private key")


def test_push_to_a_bad_url_or_a_store_down_says_so_before_any_warm_up(tmp_path):
    private = signing.keygen(str(tmp_path))[0]
    env = {signing.SIGNING_KEY_ENV: private}
    one_line(invoke("store", "push", "--store", "http://127.0.0.1:6379", env=env), 2,
             "zerojit store push: store 'http://127.0.0.1:6379': give a redis:// or rediss:// URL")
    port = free_port()
    start = time.monotonic()
    one_line(invoke("store", "push", "--store", f"redis://:pw@127.0.0.1:{port}/0", env=env), 1,
             f"zerojit store push: store redis://:***@127.0.0.1:{port}/0 is down (exists: ")
    assert time.monotonic() - start < 5  # no warm-up of the dsv4-like key space first


def test_a_store_url_that_is_no_url_or_comes_from_the_environment_is_named(tmp_path):
    one_line(invoke("store", "status", "--store", "redis://:pw@[::1"), 2,
             "zerojit store status: store 'redis://***@[::1': not a URL (Invalid IPv6 URL)")
    one_line(invoke("run", "--warmup", "triton", env={"ZEROJIT_STORE": "redis://:pw@127.0.0.1:6379/0"}), 2,
             "zerojit run: ZEROJIT_STORE and --warmup triton conflict: only a zerojit warm-up pulls from a store")
    from zerojit.warmup_store import UnknownStoreError, open_store

    with pytest.raises(UnknownStoreError, match=re.escape("store '[::1': not a URL (Invalid IPv6 URL)")):
        open_store("redis://:pw@[::1")
    with pytest.raises(TypeError, match="give a URL .* or a WarmupStore, not a int .it has no pull, push, close."):
        open_store(123)


def test_status_and_wait_name_the_missing_entries_of_the_key_space(flush, tmp_path, monkeypatch):
    """The default config's key space against an empty store: every needed entry missing, named
    with nothing compiled; wait gives up after --timeout with exit 1, also for a store down."""
    import re

    from triton import knobs

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "node-cache"))
    status = invoke("store", "status", "--store", flush)
    assert status.exit_code == 0, (status.output, status.exception)
    m = re.fullmatch(r"redis://:\*\*\*@127\.0\.0\.1:\d+/0: 0 of (\d+) needed entries in the store; missing: "
                     r"([A-Z2-7]{52}), .*\n", status.output)
    assert m and int(m.group(1)) > 5, status.output
    assert not any(p.name == m.group(2) for p in (tmp_path / "node-cache").iterdir())  # named, not compiled
    start = time.monotonic()
    one_line(invoke("store", "wait", "--timeout", "1", "--store", flush), 1,
             f"zerojit store wait: not ready after 1 s: 0 of {m.group(1)} needed entries in the store; missing: "
             f"{m.group(2)}")
    one_line(invoke("store", "wait", "--timeout", "1", "--store", f"redis://127.0.0.1:{free_port()}/0"), 1,
             "zerojit store wait: not ready after 1 s: store redis://127.0.0.1:")
    # --timeout 0 checks once: the one try is made, whatever the key space's build took
    one_line(invoke("store", "wait", "--timeout", "0", "--store", flush), 1,
             f"zerojit store wait: not ready after 0 s: 0 of {m.group(1)} needed entries in the store")
    assert time.monotonic() - start < 30


def test_gc_of_an_empty_store_and_a_bad_count(flush):
    result = invoke("store", "gc", "--keep-builds", "2", "--store", flush)
    assert result.exit_code == 0 and result.output.endswith(
        ": kept 0 builds; dropped 0 entries of older builds and 0 values that were no zerojit entry\n"), result.output
    one_line(invoke("store", "gc", "--keep-builds", "0", "--store", flush), 2, "zerojit store gc: Invalid value for "
             "'--keep-builds'")


def test_the_start_up_script_farm_push_node_wait_then_run_pulls_everything(flush, tmp_path):
    """docs/start-up.md's fleet script: the farm (no GPU) pushes the key space, a node with an
    empty cache waits for the store, then ``zerojit run --store`` pulls every entry and replays
    the trace with 0 runtime compiles; ``--push`` without a signing key, or without ``--store``,
    is refused in one line before anything compiles."""
    from _cli import run_zerojit

    private, public, _ = signing.keygen(str(tmp_path / "keys"))
    farm = run_zerojit(["store", "push", "--store", flush, "--target", "cuda:90", "--no-progress"],
                       tmp_path / "farm-cache", tmp_path, env={signing.SIGNING_KEY_ENV: private})
    assert farm.returncode == 0 and " entries (" in farm.stdout, farm.stdout + farm.stderr
    node_env = {signing.VERIFY_KEYS_ENV: public, "TRITON_HOME": str(tmp_path / "node-home")}
    wait = run_zerojit(["store", "wait", "--store", flush, "--timeout", "30"], tmp_path / "node-cache", tmp_path,
                       env=node_env)
    assert wait.returncode == 0, wait.stdout + wait.stderr
    node = run_zerojit(["run", "--device", "cpu", "--requests", "20", "--no-progress", "--store", flush],
                       tmp_path / "node-cache", tmp_path, env=node_env)
    assert node.returncode == 0, node.stdout + node.stderr
    keys = int(node.stdout.split("warm-up      zerojit: ")[1].split(" keys")[0])
    assert f"{keys} pulled from the store, then loaded from the disk cache" in node.stdout, node.stdout
    assert "generic variants: " in node.stdout and " 0 missing, 0 refused" in node.stdout, node.stdout
    assert "monitor      error: 0 runtime compiles" in node.stdout, node.stdout
    for args, env, text in ((["--store", flush, "--push"], node_env, "needs a signing key: set ZEROJIT_STORE_SIGNING_KEY"),
                            (["--push"], node_env, "--push needs --store URL")):
        refused = run_zerojit(["run", "--device", "cpu", *args], tmp_path / "other-cache", tmp_path, env=env)
        assert (refused.returncode, refused.stdout) == (2, ""), refused.stdout + refused.stderr
        assert refused.stderr.startswith("zerojit run: ") and text in refused.stderr and \
            len(refused.stderr.splitlines()) == 1, refused.stderr
