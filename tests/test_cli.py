"""The ``zerojit`` command line: bad input is refused up front (exit 2, one message, no
traceback), reports say what they mean, and ``--help`` / ``--version`` read cleanly.

Every ``run`` here is refused before warm-up, so nothing compiles; the only compile-free helpers
run in process through typer's ``CliRunner``.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

from typer.testing import CliRunner

import zerojit
from zerojit.cli import app

SRC = Path(zerojit.__file__).resolve().parents[1]  # the zerojit under test, for the subprocesses too

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env=env)


def run_cli(*args: str, env: dict | None = None):
    return invoke("run", "--device", "cpu", "--no-progress", "--requests", "5", *args, env=env)


def refused(result, *needles: str) -> str:
    """Exit 2 with a message containing every needle, no traceback, and no run started."""
    text = result.output
    assert result.exit_code == 2, (result.exit_code, text, result.exception)
    assert "Traceback" not in text and not isinstance(result.exception, (ValueError, OSError)), text
    assert "zerojit run: dsv4-like" not in text  # the run never started
    for n in needles:
        assert n in text, text
    return text


# ------------------------------------------------------------------------------ 1, 2: --trace
def test_missing_trace_file_exits_2(tmp_path):
    missing = tmp_path / "nosuch.csv"
    refused(run_cli("--trace", str(missing)), f"zerojit run: trace file '{missing}' does not exist")


def test_trace_directory_exits_2(tmp_path):
    refused(run_cli("--trace", str(tmp_path)), f"trace file '{tmp_path}' is a directory")


def test_header_only_trace_exits_2(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text(HEADER)
    refused(run_cli("--trace", str(empty)), f"trace '{empty}' has no requests")


def test_trace_not_utf8_late_in_the_file_names_the_line_and_byte(tmp_path):
    rows = "".join(f"2023-11-16 18:15:{i:02d}.0,{100 + i},44\n" for i in range(55))
    data = (HEADER + rows).encode().replace(b",148,", b",1\xff48,")  # line 50
    trace = tmp_path / "latin.csv"
    trace.write_bytes(data)
    offset = data.index(b"\xff")
    text = refused(run_cli("--trace", str(trace), "--requests", "100"),
                   f"zerojit run: {trace}, line 50: byte 0xff at byte offset {offset} (column 24) is not UTF-8")
    assert len(text.strip().splitlines()) == 1


# ------------------------------------------------------------------------------ 3: --json
@pytest.mark.parametrize("where", ["missing-dir", "directory"])
def test_unwritable_json_path_is_refused_before_the_run(tmp_path, where):
    path = str(tmp_path / "nosuch" / "o.json") if where == "missing-dir" else str(tmp_path)
    text = refused(run_cli("--json", path), f"zerojit run: --json '{path}'")
    assert len(text.strip().splitlines()) == 1
    assert ("does not exist" if where == "missing-dir" else "is a directory") in text


def test_audit_and_bundle_export_check_their_output_paths_first(tmp_path):
    path = str(tmp_path / "nosuch" / "o.json")
    refused(invoke("audit", "--json", path, "--", "true"), "zerojit audit: --json")
    refused(invoke("bundle", "export", "-o", path), "zerojit bundle export: --output")


# ------------------------------------------------------------------------------ 4, 5: --target
def test_malformed_target_exits_2():
    refused(run_cli("--target", "bogus"), "compile-only target 'bogus' is not of the form")


def test_unknown_cuda_architecture_is_refused_listing_the_supported_ones():
    text = refused(run_cli("--target", "cuda:999"), "compile-only target 'cuda:999'", "cannot compile for",
                   "supported: cuda:70")
    assert "cuda:90" in text and "cuda:120" in text
    refused(invoke("demo", "--target", "cuda:999"), "zerojit demo: compile-only target 'cuda:999'")


def test_supported_cuda_capabilities_come_from_tritons_ptxas():
    from zerojit.compile_only import parse_target, supported_cuda_capabilities

    from zerojit.triton_compat import VERSION

    supported = supported_cuda_capabilities()
    for c in (75, 80, 86, 89, 90, 100, 120):  # each compiles with Triton 3.6-3.9's ptxas (sm_90a, sm_100a, ...)
        assert c in supported and parse_target(f"cuda:{c}").arch == c
    # CUDA 13's ptxas (Triton 3.7 on) renamed sm_101 to sm_110
    renamed = 101 if VERSION >= (3, 7) else 110
    assert (110 in supported) == (VERSION >= (3, 7))
    for c in (50, 88, renamed, 999):  # below sm_70, unknown to its ptxas, or unknown to both
        assert c not in supported
        with pytest.raises(ValueError, match=rf"cuda:{c}'.*supported: cuda:70"):
            parse_target(f"cuda:{c}")
    assert parse_target("hip:gfx942").arch == "gfx942"  # HIP archs: a probe compile, see test_compile_only


def test_unknown_hip_arch_exits_2_before_any_work(tmp_path):
    p = run_cli("--target", "hip:gfx123", env={"TRITON_CACHE_DIR": str(tmp_path / "c")})
    text = refused(p, "compile-only target 'hip:gfx123'")
    assert "unsupported target: 'gfx123'" in text and "PassManager" not in text and "tt.func" not in text


# ------------------------------------------------------------------------------ 6: --config
def test_config_directory_is_named_a_directory(tmp_path):
    text = refused(run_cli("--config", str(tmp_path)), f"zerojit run: invalid config path: '{tmp_path}' is a directory")
    assert "does not exist" not in text


def test_config_directory_named_without_a_separator_is_named_a_directory(tmp_path, monkeypatch):
    """`--config configs` (a folder here, no path separator) is not an unknown shipped name."""
    (tmp_path / "configs").mkdir()
    monkeypatch.chdir(tmp_path)
    text = refused(run_cli("--config", "configs"), "zerojit run: invalid config path: 'configs' is a directory, not a "
                   "JSON file")
    assert "unknown config" not in text


@pytest.mark.parametrize("given, message", [
    ("empty.csv", "'empty.csv' is not a JSON config file: a config file's name ends in .json (shipped configs are "),
    ("./missing.json", "'./missing.json' does not exist"),  # as given, not Path's 'missing.json'
    ("some_dir/", "'some_dir/' is a directory, not a JSON file"),
])
def test_config_that_is_no_json_file_is_named_as_given_in_one_line(tmp_path, monkeypatch, given, message):
    """`--config empty.csv` (a file here, no .json) is not an unknown shipped name."""
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "some_dir").mkdir()
    monkeypatch.chdir(tmp_path)
    text = refused(run_cli("--config", given), f"zerojit run: invalid config path: {message}")
    assert "unknown config" not in text and len(text.strip().splitlines()) == 1


def test_config_path_that_is_no_json_says_what_a_config_file_is(tmp_path):
    cfg = tmp_path / "empty.csv"
    cfg.write_text("")
    refused(run_cli("--config", str(cfg)), f"invalid config file: {cfg}: cannot read a JSON object:",
            "(a config file is JSON, named *.json)")


def test_config_field_set_twice_is_refused_naming_it(tmp_path):
    cfg = tmp_path / "twice.json"  # json.loads would keep the last block_size silently
    cfg.write_text('{"block_size": 64, "compress_ratios": [4], "index_topk": 2048, "block_size": 256}')
    text = refused(run_cli("--config", str(cfg)), "field 'block_size' is set more than once")
    assert "index_topk" not in text.split("more than once")[1]


# ------------------------------------------------------------------------------ 7: bundle export
def test_warmup_origin_says_workers_compiled_then_this_process_loaded():
    from zerojit.registry import WarmupStats

    assert (WarmupStats(worker_compiled=21, disk_loads=21, workers=2).origin()
            == "21 compiled by 2 worker processes, then loaded from the disk cache")
    assert WarmupStats(compiled=3).origin() == "3 compiled in this process"
    warm = WarmupStats(disk_loads=21, workers=0).origin()
    assert warm == "21 loaded from the disk cache, compiled before this warm-up" and "worker" not in warm
    assert "1 worker process," in WarmupStats(worker_compiled=1, disk_loads=1, workers=1).origin()
    assert WarmupStats(compiled=4).origin(variants=19) == "4 compiled in this process; 15 already in this process"
    # another process compiled them while this one's workers waited for the entries' locks
    assert (WarmupStats(worker_compiled=5, disk_loads=21, lock_waits=16, workers=2).origin()
            == "5 compiled by 2 worker processes, then loaded from the disk cache; 16 compiled meanwhile by another "
               "process (this warm-up waited for its lock), then loaded from the disk cache")
    assert WarmupStats().origin(variants=0) == "nothing compiled or loaded"  # e.g. every key failed


# ------------------------------------------------------------------------------ 8: --warmup none
def test_no_warmup_is_said_and_never_None():
    from zerojit.audit import CoverageAudit, KernelCoverage, RuntimeMiss
    from zerojit.monitor import RuntimeCompile

    rec = RuntimeCompile(kernel="k", function="m.k", param_names=("n",), specialization=(),
                         no_warmup="no zerojit warm-up ran (--warmup none)")
    line = rec.summary()
    assert line.endswith("; no zerojit warm-up ran (--warmup none)") and "after warm-up" not in line
    assert "registration" not in rec.explain(blocked=False)
    miss = RuntimeMiss("n: i32", 1, 1, 0, 0, no_warmup=rec.no_warmup)
    table = CoverageAudit(kernels=(KernelCoverage("k", misses=(miss,)),)).table()
    assert "no zerojit warm-up ran (--warmup none)" in table and "None" not in table
    assert "None" not in RuntimeMiss("n: i32", 1, 1, 0, 0).nearest  # no key of this kernel was warmed


# ------------------------------------------------------------------------------ 9: small points
def test_bundle_inspect_of_a_missing_file_exits_2(tmp_path):
    result = invoke("bundle", "inspect", str(tmp_path / "nosuch.tar.gz"))
    assert result.exit_code == 2 and "does not exist" in result.output


def test_bundle_import_names_a_target_given_as_given(tmp_path):
    from zerojit.cache import BUNDLE_FORMAT, BUNDLE_VERSION, MANIFEST_NAME, fingerprint

    manifest = {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, **fingerprint("cuda:90"), "kernels": {},
                "entries": {}, "created": "", "zerojit_version": ""}
    bundle = tmp_path / "b.tar.gz"
    data = json.dumps(manifest).encode()
    with tarfile.open(bundle, "w:gz") as tar:
        info = tarfile.TarInfo(MANIFEST_NAME)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    result = invoke("bundle", "import", str(bundle), "--target", "cuda:80", "--cache-dir", str(tmp_path / "cache"))
    assert result.exit_code == 1, result.output
    assert "the target given (--target) is 'cuda:80'" in result.output and "this machine" not in result.output


def test_version():
    import zerojit

    result = invoke("--version")
    assert result.exit_code == 0 and result.output.strip() == f"zerojit {zerojit.__version__}"


def test_help_paragraphs_are_reflowed_and_option_names_fit_80_columns():
    from zerojit import cli

    for fn in (cli.run_command, cli.audit, cli.bundle_export, cli.bundle_import, cli.bundle_inspect):
        assert all("\n" not in p for p in fn.__doc__.split("\n\n")), fn.__name__
    env = {"COLUMNS": "80", "TERMINAL_WIDTH": "80"}
    for command in (["run"], ["bundle", "export"]):
        text = invoke(*command, "--help", env=env).output
        assert "--num-speculative-tokens " in text and "…" not in text, text
        assert max(len(line) for line in text.splitlines()) <= 80
    run_help = " ".join(invoke("run", "--help", env=env).output.split())
    assert "under the registry (their layers register their kernels), warms up" in run_help


def test_counts_are_singular_for_one():
    from zerojit.cache import BundleManifest
    from zerojit.registry import KernelWarmup, WarmupReport, count

    assert (count(1, "kernel"), count(2, "kernel"), count(1, "cache entry", "cache entries")) == \
        ("1 kernel", "2 kernels", "1 cache entry")
    report = WarmupReport(kernels=(KernelWarmup("k", (1,), (), 0.0),), target="cuda:90")
    assert report.summary().startswith("warm-up: 1 key over 1 kernel in") and "0 failures" in report.summary()
    manifest = BundleManifest("3.6.0", "b", "cpython-3.11", "cuda:90", "k", None, kernels={"k": {"keys": [{}]}},
                              entries={"e": {}})
    assert manifest.summary().startswith("zerojit bundle: 1 key of 1 kernel, 1 cache entry")


# ------------------------------------------------------------------------------ 10: dead keys
def test_dead_keys_are_explained_in_the_audit():
    from zerojit.audit import CoverageAudit, KernelCoverage, RuntimeMiss, WarmedKey

    unreached = KernelCoverage("k5", warmed=(WarmedKey("tile=1", 20), WarmedKey("tile=256", 0)), hits=20)
    audit = CoverageAudit(kernels=(unreached,))
    assert audit.dead_notes() == ["dead = warmed, never hit by this run (k5): keys of the declared key space that "
                                  "this traffic did not reach; no miss, so not a bug"]
    assert "note: dead = warmed, never hit by this run (k5)" in audit.table()
    missed = KernelCoverage("k1", warmed=(WarmedKey("a", 0),), misses=(RuntimeMiss("n: i32", 1, 1, 0, 0, nearest_key="a"),))
    notes = CoverageAudit(kernels=(missed,)).dead_notes()
    assert len(notes) == 1 and "may disagree" in notes[0]
    assert CoverageAudit(kernels=(KernelCoverage("k", warmed=(WarmedKey("a", 1),), hits=1),)).dead_notes() == []


# ------------------------------------------------------------------------------ issue 16: exit status, no traceback
def one_line(result, status: int, *needles: str) -> str:
    """Exit ``status`` with one line on stderr naming every needle, and no traceback."""
    text = result.output
    assert result.exit_code == status, (result.exit_code, text, result.exception)
    assert "Traceback" not in text and not isinstance(result.exception, (ValueError, OSError, RuntimeError)), text
    lines = [line for line in text.splitlines() if line.startswith("zerojit ")]
    assert len(lines) == 1, text
    for n in needles:
        assert n in lines[0], text
    return lines[0]


@pytest.mark.parametrize("command", [["demo"], ["bundle", "export", "-o", "OUT", "--no-progress"],
                                     ["run", "--device", "cpu", "--no-progress", "--requests", "1"]])
def test_an_unusable_cache_folder_is_invalid_input_in_every_warming_command(command, tmp_path, monkeypatch):
    from triton import knobs

    args = [str(tmp_path / "b.tar.gz") if a == "OUT" else a for a in command]
    name = " ".join(command[:2]) if command[0] == "bundle" else command[0]
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(knobs.cache, "dir", str(blocker))
    line = one_line(invoke(*args), 2, f"zerojit {name}: warm-up: Triton's cache folder '{blocker}' is a file")
    assert line.endswith("point TRITON_CACHE_DIR at a writable folder")
    # read-only and empty (simulated, so it also holds as root, who ignores folder permissions)
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: (mode != os.W_OK and real_access(p, mode)) if str(p) == str(ro)
                        else real_access(p, mode))
    monkeypatch.setattr(knobs.cache, "dir", str(ro))
    one_line(invoke(*args), 2, f"cache folder '{ro}' is read-only and holds no compiled kernel")
    assert not (tmp_path / "b.tar.gz").exists()


@pytest.mark.parametrize("command", [["bundle", "import"], ["bundle", "inspect"]])
def test_a_missing_bundle_is_invalid_input_and_a_corrupted_one_refused(command, tmp_path):
    name = " ".join(command)
    one_line(invoke(*command, "/missing.bundle"), 2, f"zerojit {name}: bundle '/missing.bundle' does not exist")
    one_line(invoke(*command, str(tmp_path)), 2, f"bundle '{tmp_path}' is a directory, not a file")
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not an archive at all")
    one_line(invoke(*command, str(junk), *(["--target", "cuda:90"] if "import" in command else [])), 1,
             f"zerojit {name}: bundle {junk} is not a zerojit bundle (a gzip tar archive")


@pytest.mark.parametrize("command, what", [
    (["run", "--device", "cpu", "--trace"], "trace file"), (["run", "--device", "cpu", "--config"], "config path"),
    (["warmup", "--manifest"], "manifest"), (["exec", "--manifest", "{}", "--", "python", "x.py"], "manifest"),
    (["manifest", "widen", "{}", "--axis", "k:p=1", "-o", "o.json"], "manifest"),
    (["manifest", "merge", "{}", "-o", "o.json"], "manifest"), (["bundle", "import"], "bundle"),
    (["bundle", "inspect"], "bundle")], ids=lambda v: " ".join(v[:2]) if isinstance(v, list) else v)
def test_an_input_file_that_is_a_fifo_is_refused_at_once_not_waited_on(command, what, tmp_path):
    """A FIFO named as an input: its open would wait for a writer for ever; each command refuses
    it in one line, exit 2, at once (the subprocess deadline is the proof: it never opens it)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    args = [a.replace("{}", str(fifo)) for a in command]
    if "{}" not in " ".join(command):
        args.append(str(fifo))
    done = subprocess.run([sys.executable, "-m", "zerojit", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(SRC)})
    lines = [line for line in done.stderr.splitlines() if line.startswith("zerojit ")]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert what in lines[0] and str(fifo) in lines[0] and ("FIFO" in lines[0] or "not a regular file" in lines[0])


def test_learned_merge_of_a_file_named_outright_that_does_not_exist_is_invalid_input(tmp_path):
    one_line(invoke("learned", "merge", "--file", str(tmp_path / "typo.jsonl"), "-o", str(tmp_path / "m.json")), 2,
             f"zerojit learned merge: --file '{tmp_path / 'typo.jsonl'}' does not exist")
    assert not (tmp_path / "m.json").exists()


def test_a_command_that_cannot_run_is_invalid_input_for_audit():
    one_line(invoke("audit", "--", "/nonexistent/zerojit-cmd"), 2,
             "zerojit audit: cannot run '/nonexistent/zerojit-cmd': No such file or directory")


# ------------------------------------------------------------------------------ issue 16: conflicting flags
@pytest.mark.parametrize("warmup", ["none", "triton"])
@pytest.mark.parametrize("mode", ["error", "off"])
def test_a_comparison_warmup_refuses_a_monitor_mode_other_than_warn(warmup, mode):
    line = one_line(run_cli("--warmup", warmup, "--jit-monitor-mode", mode), 2,
                    f"zerojit run: --warmup {warmup} and --jit-monitor-mode {mode} conflict: a triton or none warm-up "
                    "runs the monitor in warn mode")
    assert "zerojit run: dsv4-like" not in line
    one_line(invoke("run", "--warmup", warmup, "--no-progress", env={"ZEROJIT_JIT_MONITOR": mode}), 2,
             f"--warmup {warmup} and ZEROJIT_JIT_MONITOR={mode} conflict")


def test_workers_with_a_triton_warmup_are_refused_naming_both_flags():
    one_line(run_cli("--warmup", "triton", "--workers", "4"), 2,
             "zerojit run: --warmup triton and --workers 4 conflict: only a zerojit warm-up has compile workers")


def test_run_options_refuse_the_same_conflicts_naming_the_fields():
    from zerojit.runner.engine import RunError, RunOptions

    with pytest.raises(RunError, match="warmup='none' and jit_monitor_mode='error' conflict"):
        RunOptions(warmup="none", jit_monitor_mode="error")
    with pytest.raises(RunError, match="warmup='triton' and workers=2 conflict"):
        RunOptions(warmup="triton", workers=2)
    assert RunOptions(warmup="none").monitor_mode == "warn" and RunOptions().monitor_mode == "error"
    assert RunOptions(warmup="triton", jit_monitor_mode="warn", workers=1).monitor_mode == "warn"


def test_workers_above_the_cores_are_capped_with_a_note(monkeypatch, tmp_path):
    from zerojit.runner import engine
    from zerojit.runner.engine import RunOptions

    from zerojit.registry import WorkerChoice

    monkeypatch.setattr(engine, "usable_cores", lambda: 2)
    assert RunOptions(workers=64).warmup_workers == WorkerChoice(2, "2 workers (64 asked, capped to the 2 cores)")
    assert RunOptions(workers=2).warmup_workers == 2 and RunOptions().warmup_workers is None
    missing = tmp_path / "nosuch.csv"
    result = run_cli("--workers", "64", "--trace", str(missing))  # capped, then refused before any work
    assert "zerojit run: note: --workers 64 is more than the 2 cores this process can use; using 2" in result.output
    assert result.exit_code == 2 and f"trace file '{missing}' does not exist" in result.output


def test_usable_cores_is_this_process_affinity():
    from zerojit.runner.engine import usable_cores

    assert usable_cores() == len(os.sched_getaffinity(0)) >= 1


# ------------------------------------------------------------------------------ issue 16: --help and plurals
@pytest.mark.parametrize("command", [[], ["run"], ["demo"], ["audit"], ["bundle"], ["bundle", "export"],
                                     ["bundle", "import"], ["bundle", "inspect"]])
def test_help_lists_no_python_types(command):
    import re

    text = invoke(*command, "--help", env={"COLUMNS": "100"}).output
    help_line = next(line for line in text.splitlines() if "--help" in line)
    assert "Show this message and exit." in help_line and "<bool>" not in help_line, text
    assert not re.search(r"<(bool|str|int|list\[str\])>", text), text  # FILE <str>, COMMAND... <list[str]>


def test_run_help_documents_what_a_config_file_must_set_and_its_defaults():
    text = " ".join(invoke("run", "--help", env={"COLUMNS": "200"}).output.replace("│", " ").split())
    assert "it must set block_size, compress_ratios, index_topk; a field it leaves out takes its default" in text
    assert "sliding_window 128, max_model_len 65536" in text and "num_speculative_tokens 0" in text
    assert ("default: fallback on a GPU, error under compile-only (--device cpu; what CI and tests use); with "
            "--warmup triton or none only warn") in text


def test_the_report_says_one_request_and_gives_the_kv_cache_as_values():
    from zerojit.audit import CoverageAudit, KernelCoverage, WarmedKey
    from zerojit.runner.config import load_config
    from zerojit.runner.engine import KVCacheSummary, RequestPathCost, RunReport, WarmupSummary

    kv = KVCacheSummary(num_blocks=1, handed_out=1, layers_per_pack=1, block_stride_rows=256,
                        compressed_block_strides={4: 64, 128: 2}, swa_block_stride_rows=256, bytes=3 << 20)
    audit = CoverageAudit(kernels=(KernelCoverage("k", warmed=(WarmedKey("a", 1),), hits=1),))
    report = RunReport(
        config=load_config("dsv4-like"), backend="flashmla_sparse", device="cpu", target="cuda:90",
        monitor_mode="error", trace="t.csv", requests=1, clipped=0, steps=1, tokens=1, prefill_tokens=1,
        decode_tokens=0, preemptions=1, launches=1, warmup=WarmupSummary("zerojit", 1, 0.1, "cuda:90", {"k": 1}),
        runtime_compiles=1, request_path=RequestPathCost(compiles=1, loads=1, cold_steps=1), first_step_ms=1.0,
        median_step_ms=1.0, max_step_ms=1.0, replay_seconds=0.1, total_seconds=0.2, kv_cache=kv, audit=audit)
    text = report.summary()
    for phrase in ("1 speculative token)", "t.csv: 1 request (0 clipped", "1 step, 1 token (1 prefill, 0 decode), "
                   "1 preemption, 1 launch,", "error: 1 runtime compile\n", "request path 1 compile (", "1 module load, "
                   "1 cold step (", "1 warmed key, 0 dead", "1 hit     0 misses", "1 RUNTIME COMPILE after warm-up",
                   "KV cache     1 block (1 handed out), 1 layer per pack: block_stride_rows 256, compressed "
                   "{ratio 4: 64, ratio 128: 2}, swa 256; 3 MiB"):
        assert phrase in text, (phrase, text)
    for wrong in ("1 requests", "1 steps", "1 launches", "1 misses", "1 hits", "1 compiles"):
        assert wrong not in text, wrong
    data = json.loads(json.dumps(report.to_dict()))
    assert data["kv_cache"] == {"num_blocks": 1, "handed_out": 1, "layers_per_pack": 1, "block_stride_rows": 256,
                                "compressed_block_strides": [{"ratio": 4, "block_stride_rows": 64},
                                                             {"ratio": 128, "block_stride_rows": 2}],
                                "swa_block_stride_rows": 256, "bytes": 3 << 20}


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without a GPU")
def test_bundle_export_for_the_gpu_here_without_one_names_the_flag_to_use(tmp_path):
    one_line(invoke("bundle", "export", "-o", str(tmp_path / "b.tar.gz"), "--target", "device"), 2,
             "zerojit bundle export: --target device: no GPU is visible here; pass the compile-only target the bundle "
             "is for (e.g. --target cuda:90)")


# ------------------------------------------------------------------------------ fresh user: output paths
def test_bundle_export_never_replaces_what_is_not_a_regular_file(tmp_path):
    link = tmp_path / "link.tar.gz"
    link.symlink_to(tmp_path / "elsewhere")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/full", str(fifo)):
        one_line(invoke("bundle", "export", "-o", path), 2,
                 f"zerojit bundle export: --output {path!r}: cannot write there: exists and is not a regular file")
    one_line(invoke("bundle", "export", "-o", str(link)), 2,
             f"zerojit bundle export: --output {str(link)!r}: cannot write there: is a symbolic link to "
             f"{str(tmp_path / 'elsewhere')!r}")
    assert os.path.islink(link) and os.path.exists("/dev/full") and not os.path.isfile("/dev/full")
    one_line(invoke("bundle", "export", "-o", ""), 2, "zerojit bundle export: --output '': the path is empty")
    one_line(invoke("bundle", "export", "-o", "/proc/x.bundle"), 2,
             "zerojit bundle export: --output '/proc/x.bundle': cannot write there: no file can be created in "
             "its directory '/proc'")


# ------------------------------------------------------------------------------ fresh user: the environment
@pytest.fixture
def monitor_configuration(monkeypatch):
    """Restore the process monitor's configuration a command under test sets."""
    from zerojit import monitor

    monkeypatch.setattr(monitor, "_configured", monitor._configured)
    return monitor


@pytest.mark.parametrize("command", [["demo"], ["bundle", "export", "-o", "OUT", "--no-progress"]])
def test_a_bad_monitor_variable_is_refused_before_any_warm_up(command, tmp_path, monitor_configuration, monkeypatch):
    from zerojit import registry as registry_module

    monkeypatch.setattr(registry_module.JitWarmupRegistry, "warmup",
                        lambda *a, **k: pytest.fail("warmed up despite a bad ZEROJIT_JIT_MONITOR"))
    args = [str(tmp_path / "b.tar.gz") if a == "OUT" else a for a in command]
    name = " ".join(command[:2]) if command[0] == "bundle" else command[0]
    one_line(invoke(*args, env={"ZEROJIT_JIT_MONITOR": "bogus"}), 2,
             f"zerojit {name}: ZEROJIT_JIT_MONITOR must be one of off, warn, error, fallback, not 'bogus': "
             "unset ZEROJIT_JIT_MONITOR")


def test_the_monitor_flag_wins_over_a_bad_monitor_variable(tmp_path, monitor_configuration):
    missing = tmp_path / "nosuch.csv"  # refused inside the run, after the monitor mode is settled
    result = run_cli("--jit-monitor-mode", "warn", "--trace", str(missing), env={"ZEROJIT_JIT_MONITOR": "bogus"})
    one_line(result, 2, f"trace file '{missing}' does not exist")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ZEROJIT_JIT_MONITOR", "bogus")
        assert monitor_configuration.configured_mode() == "warn"


@pytest.mark.parametrize("command", [["demo"], ["bundle", "export", "-o", "OUT", "--no-progress"],
                                     ["run", "--device", "cpu", "--no-progress", "--requests", "1"]])
def test_an_interpreting_process_is_told_to_unset_triton_interpret(command, tmp_path, monkeypatch):
    from zerojit import triton_compat

    monkeypatch.setattr(triton_compat, "interpreting", lambda: True)
    args = [str(tmp_path / "b.tar.gz") if a == "OUT" else a for a in command]
    name = " ".join(command[:2]) if command[0] == "bundle" else command[0]
    one_line(invoke(*args), 2, f"zerojit {name}: compile_only() needs a process without TRITON_INTERPRET=1",
             "unset TRITON_INTERPRET")


def test_compile_only_in_an_interpreting_process_is_still_a_runtime_error(monkeypatch):
    from zerojit import triton_compat
    from zerojit.compile_only import InterpreterProcessError, compile_only

    monkeypatch.setattr(triton_compat, "interpreting", lambda: True)
    with pytest.raises(InterpreterProcessError) as info, compile_only("cuda:90"):
        pass
    assert isinstance(info.value, RuntimeError)


# ------------------------------------------------------------------------------ fresh user: --json writes
class _Report:
    ok = True

    def summary(self) -> str:
        return "the run's summary"

    def to_dict(self) -> dict:
        return {"ok": True}


def test_run_json_that_cannot_be_written_is_refused_naming_the_flag(monkeypatch):
    from zerojit.runner import engine

    monkeypatch.setattr(engine, "run", lambda options: _Report())
    line = one_line(run_cli("--json", "/dev/full"), 2, "zerojit run: --json '/dev/full': cannot write there")
    assert "exists and is not a regular file (a character device)" in line  # refused before the run: never replaced
    assert "the run's summary" not in run_cli("--json", "/dev/full").output
    refused(run_cli("--json", "/proc/x.json"), "zerojit run: --json '/proc/x.json': cannot write there: no file "
            "can be created in its directory '/proc'")
    refused(run_cli("--json", ""), "zerojit run: --json '': the path is empty")


def test_audit_json_that_cannot_be_written_is_refused_naming_the_flag():
    import sys

    from zerojit.audit import AUDIT_OUT_ENV, CoverageAudit

    script = f"import os; open(os.environ[{AUDIT_OUT_ENV!r}], 'w').write({CoverageAudit(kernels=()).to_json()!r})"
    result = invoke("audit", "--json", "/dev/full", "--", sys.executable, "-c", script)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "zero runtime compiles" not in result.output  # refused before the script runs: /dev/full is never replaced
    assert [line for line in result.output.splitlines() if line.startswith("zerojit audit:")] == [
        "zerojit audit: --json '/dev/full': cannot write there: exists and is not a regular file (a character "
        "device); it would be replaced: remove it or write elsewhere"]
    one_line(invoke("audit", "--json", "/proc/x.json", "--", "true"), 2, "zerojit audit: --json '/proc/x.json'")
    one_line(invoke("audit", "--json", "", "--", "true"), 2, "zerojit audit: --json '': the path is empty")


# ------------------------------------------------------------------------------ fresh user: flags, not the file
RUN = ["run", "--device", "cpu", "--no-progress"]
EXPORT = ["bundle", "export", "-o", "OUT", "--no-progress"]


@pytest.mark.parametrize("command, flags, problem", [
    *[(c, ["--dcp-size", "0"], "--dcp-size 0: must be >= 1") for c in (RUN, EXPORT)],
    *[(c, ["--num-speculative-tokens", "-1"], "--num-speculative-tokens -1: must be >= 0") for c in (RUN, EXPORT)],
    (EXPORT, ["--dcp-size", "2", "--dcp-interleave", "0"], "--dcp-interleave 0: must be >= 1"),
    (RUN, ["--dcp-size", "2", "--dcp-rank", "5"], "--dcp-rank 5: must be < dcp_size=2"),
])
def test_a_bad_flag_value_is_named_as_the_flag_not_blamed_on_the_config(command, flags, problem, tmp_path):
    args = [str(tmp_path / "b.tar.gz") if a == "OUT" else a for a in command]
    name = " ".join(command[:2]) if command[0] == "bundle" else command[0]
    result = invoke(*args, *flags)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    flag = problem.split()[0]  # one problem: one line, naming the flag and the config as given
    assert result.output.startswith(f"zerojit {name}: invalid {flag} for config dsv4-like: {problem}"), result.output
    assert len(result.output.splitlines()) == 1, result.output


def test_a_config_file_problem_is_still_the_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"block_size": 3, "compress_ratios": [4], "index_topk": 8}))
    result = run_cli("--config", str(bad), "--dcp-size", "0")
    assert result.exit_code == 2 and "invalid config bad.json (3 problems)" in result.output, result.output
    assert "--dcp-size 0: must be >= 1" in result.output and "block_size=3" in result.output


# ------------------------------------------------------------------------------ fresh user: minor
def test_the_cap_note_says_one_core(monkeypatch, tmp_path):
    from zerojit.runner import engine

    monkeypatch.setattr(engine, "usable_cores", lambda: 1)
    result = run_cli("--workers", "4", "--trace", str(tmp_path / "nosuch.csv"))
    assert "--workers 4 is more than the 1 core this process can use; using 1" in result.output, result.output


def test_the_demo_summary_is_one_sentence():
    listing = invoke("--help").output
    lines = listing.splitlines()
    at = next(i for i, line in enumerate(lines) if " demo " in line)
    wrapped = [lines[at]] + [line for line in lines[at + 1:at + 3] if line.startswith("│   ")][:1]  # rich wraps it
    entry = " ".join(" ".join(line.strip("│").split()) for line in wrapped)
    assert "Warm up the example kernel's key space and print the warm-up report." in entry
    assert "Exit status" not in listing


def test_audit_of_a_directory_says_so(tmp_path):
    one_line(invoke("audit", "--", str(tmp_path)), 2, f"zerojit audit: cannot run '{tmp_path}': it is a directory")


def test_audit_of_a_script_killed_by_a_signal_says_so_and_exits_128_plus_n():
    result = invoke("audit", "--", "sh", "-c", "kill -9 $$")
    assert result.exit_code == 128 + 9, (result.exit_code, result.output)
    assert result.output.strip() == "zerojit audit: the script was killed by SIGKILL before it wrote its audit"


# ------------------------------------------------------------------------------ fresh user: click's own checks
@pytest.mark.parametrize("args, line", [
    (["warmup", "--manifest", "m.json", "--workers", "0"], "zerojit warmup: Invalid value for '--workers': "),
    (["run", "--workers", "x"], "zerojit run: Invalid value for '--workers': "),
    (["run", "--bogus"], "zerojit run: No such option: --bogus"),
    (["run", "--jit-monitor-mode", "loud"], "zerojit run: Invalid value for '--jit-monitor-mode'"),
    (["warmup"], "zerojit warmup: Missing option '--manifest'."),
    (["exec", "--manifest", "m.json"], "zerojit exec: Missing argument 'COMMAND...'."),
    (["record", "--target"], "zerojit record: Option '--target' requires an argument."),
    (["demo", "extra"], "zerojit demo: Got unexpected extra argument"),
    (["bundle", "import"], "zerojit bundle import: Missing argument 'FILE'."),
    (["bundle", "export", "--workers", "0"], "zerojit bundle export: Invalid value for '--workers': "),
    (["bundle", "--bogus"], "zerojit bundle: No such option: --bogus"),
    (["bundle", "bogus"], "zerojit bundle: No such command 'bogus'."),
    (["bogus"], "zerojit: No such command 'bogus'."),
    (["--bogus"], "zerojit: No such option: --bogus"),
])
def test_a_usage_error_click_finds_is_one_line_naming_the_command(args, line):
    result = invoke(*args)
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert len(result.output.splitlines()) == 1 and result.output.startswith(line), result.output


def test_help_is_still_the_full_listing():
    for args in (["warmup", "--help"], ["bundle", "export", "--help"], ["--help"]):
        result = invoke(*args)
        assert result.exit_code == 0 and "Usage:" in result.output and "╭─ Options" in result.output, result.output
    assert "--workers" in invoke("warmup", "--help").output
    bare = invoke("bundle")  # a group alone: its listing, as before
    assert "Usage:" in bare.output and "export" in bare.output and "zerojit bundle:" not in bare.output


def test_an_interrupted_command_ends_in_one_line_with_status_130(monkeypatch):
    from zerojit.runner import engine

    def interrupted(options):
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "run", interrupted)
    result = run_cli()
    assert result.exit_code == 130 and result.output == "zerojit: interrupted\n", (result.exit_code, result.output)


# ------------------------------------------------------------------------------ fresh user: progress bars
def test_progress_bars_are_off_where_stderr_is_no_terminal(monkeypatch):
    from zerojit.runner import engine

    seen = []
    monkeypatch.setattr(engine, "run", lambda options: seen.append(options.progress) or _Report())
    for flags in ([], ["--no-progress"]):
        result = invoke("run", "--device", "cpu", "--requests", "5", *flags)  # CliRunner's stderr is no terminal
        assert result.exit_code == 0, result.output
    assert seen == [False, False]


def test_progress_bars_are_on_by_default_where_stderr_is_a_terminal(monkeypatch):
    import sys

    from zerojit.cli import _progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    assert _progress(False) is True and _progress(True) is False
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert _progress(False) is False


# ------------------------------------------------------------------------------ fresh user: Ctrl-C at start-up
@pytest.mark.parametrize("how", ["python -m zerojit", "console script"])
def test_ctrl_c_during_the_start_up_imports_ends_in_one_line_with_status_130(how, tmp_path):
    """SIGINT 0.3 s after the start lands in `import zerojit` (torch, Triton: a second or more);
    a run that finished first (its listing printed) is tried again, signalled sooner."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    start = ["-m", "zerojit"] if how == "python -m zerojit" else ["-c", "import _zerojit_entry; _zerojit_entry.main()"]
    delay = 0.3
    for _ in range(4):
        proc = subprocess.Popen([sys.executable, *start, "--help"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        if not out:
            break
        delay /= 2  # it finished before the signal: a fast machine
    assert out == "", "every run finished before its signal"
    assert proc.returncode == 130 and err == "zerojit: interrupted\n", (proc.returncode, err)


def test_an_ignored_sigint_stays_ignored():
    import signal

    import _zerojit_entry

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as nohup or a background job leave it
    try:
        _zerojit_entry.exit_on_interrupt()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


# ------------------------------------------------------------------------------ fresh user, second trial
NOT_UTF8 = b"{\n  \xb0\xff" + bytes(range(256)) * 8  # binary from byte 4 on (0xb0 starts no UTF-8 character)


@pytest.mark.parametrize("command", [["warmup", "--target", "cuda:90"], ["exec", "--", "python", "SCRIPT"],
                                     ["bundle", "export", "-o", "OUT"]])
def test_a_manifest_that_is_not_utf8_is_refused_in_one_line_as_a_corrupted_one(command, tmp_path, monkeypatch):
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))  # exec puts the script's folder first
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(NOT_UTF8)
    (tmp_path / "x.py").write_text("")
    args = [str(tmp_path / "x.py") if a == "SCRIPT" else str(tmp_path / "b.tar.gz") if a == "OUT" else a
            for a in command]
    at = args.index("--") if "--" in args else len(args)
    name = " ".join(command[:2]) if command[0] == "bundle" else command[0]
    one_line(invoke(*args[:at], "--manifest", str(garbage), *args[at:]), 1,  # docs/cli.md: a corrupted manifest is 1
             f"zerojit {name}: {garbage}: not a readable manifest (not UTF-8 text: byte 4 is b'\\xb0'); record it again")


@pytest.mark.parametrize("command", [["warmup", "--target", "cuda:90"], ["exec", "--", "python", "SCRIPT"],
                                     ["bundle", "export", "-o", "OUT"]])
def test_a_manifest_nested_too_deep_is_refused_in_one_line_as_a_corrupted_one(command, tmp_path, monkeypatch):
    """JSON nested past Python's parser's recursion limit raises RecursionError, no ValueError:
    still a corrupted manifest (exit 1, one line), never a traceback."""
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))  # exec puts the script's folder first
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200000 + "]" * 200000)
    (tmp_path / "x.py").write_text("")
    args = [str(tmp_path / "x.py") if a == "SCRIPT" else str(tmp_path / "b.tar.gz") if a == "OUT" else a
            for a in command]
    at = args.index("--") if "--" in args else len(args)
    name = " ".join(command[:2]) if command[0] == "bundle" else command[0]
    result = invoke(*args[:at], "--manifest", str(deep), *args[at:])
    assert not isinstance(result.exception, RecursionError), result.exception
    one_line(result, 1, f"zerojit {name}: {deep}: not a readable manifest (nested too deep: not a manifest zerojit "
             "wrote); record it again")


def test_a_single_problem_is_one_line_naming_what_the_user_gave():
    from zerojit.runner.engine import RunError, RunOptions

    one_line(run_cli("--config", "/nonexistent.json"), 2, "zerojit run: invalid config path: '/nonexistent.json' "
             "does not exist")
    assert len(run_cli("--config", "/nonexistent.json").output.splitlines()) == 1
    line = one_line(run_cli("--warmup", "bogus"), 2, "zerojit run: --warmup 'bogus': must be one of zerojit, triton, none")
    assert len(run_cli("--warmup", "bogus").output.splitlines()) == 1, line
    with pytest.raises(RunError) as info:
        RunOptions(warmup="bogus")
    assert str(info.value) == "invalid run options: warmup='bogus': must be one of zerojit, triton, none"
    with pytest.raises(RunError, match=r"invalid run options:\n  - warmup='bogus'.*\n  - device='tpu'"):
        RunOptions(warmup="bogus", device="tpu")  # several: still a list
    # run lists the supported targets as warmup and demo do
    for command in (["run", "--device", "cpu", "--no-progress"], ["demo"]):
        refused(invoke(*command, "--target", "cuda:bogus"), "compile-only target 'cuda:bogus' is not of the form",
                "supported: cuda:70", "cuda:90")


def test_a_bad_monitor_mode_names_the_flag_or_the_variable_it_came_from(tmp_path):
    flag = one_line(invoke("exec", "--jit-monitor-mode", "loud", "--manifest", "m.json", "--", "python", "x.py"), 2,
                    "zerojit exec: Invalid value for '--jit-monitor-mode': must be one of off, warn, error, fallback, not 'loud'")
    assert "ZEROJIT_JIT_MONITOR" not in flag
    one_line(invoke("exec", "--manifest", "m.json", "--", "python", "x.py", env={"ZEROJIT_JIT_MONITOR": "loud"}), 2,
             "zerojit exec: Invalid value for ZEROJIT_JIT_MONITOR: must be one of off, warn, error, fallback, not 'loud'")


def test_demo_draws_progress_bars_only_where_stderr_is_a_terminal(monkeypatch):
    from zerojit import registry as registry_module

    seen = []
    monkeypatch.setattr(registry_module.JitWarmupRegistry, "warmup",
                        lambda self, *a, progress=True, **k: seen.append(progress) or _Report())
    for flags in ([], ["--no-progress"]):
        result = invoke("demo", *flags)  # CliRunner's stderr is no terminal
        assert result.exit_code == 0 and result.output == "the run's summary\n", result.output
    assert seen == [False, False]


def test_a_bare_zerojit_prints_the_listing_and_exits_2():
    result = invoke()
    assert result.exit_code == 2 and "Usage:" in result.output and "record" in result.output, result.output


@pytest.mark.parametrize("command, where", [(["record", "-o", "OUT"], "a child Python process"),
                                            (["exec", "--manifest", "OUT"], "this process")])
def test_a_program_that_cannot_be_run_is_refused_saying_where_it_would_run(command, where, tmp_path):
    out = tmp_path / "m.json"
    out.write_text("{}")  # an older manifest: record neither reads nor reports it
    args = [str(out) if a == "OUT" else a for a in command]
    name = command[0]
    line = one_line(invoke(*args, "--", "nosuchbinary"), 2, f"zerojit {name}: 'nosuchbinary' is not a Python program: "
                    "pass 'python SCRIPT', 'python -m MODULE', 'python -c CODE', a .py file or 'zerojit ...'",
                    f"in {where})")
    assert "wrote" not in invoke(*args, "--", "nosuchbinary").output, line
    one_line(invoke(*args, "--", "python", "-u", "app.py"), 2,
             f"zerojit {name}: python option '-u' is not supported (zerojit starts the program itself, in {where}): "
             "pass 'python SCRIPT', 'python -m MODULE' or 'python -c CODE'")
    one_line(invoke(*args, "--", "python", "-c"), 2, f"zerojit {name}: python -c needs the code")
    assert out.read_text() == "{}"


@pytest.mark.parametrize("command", [["run", "--device", "cpu", "--requests", "1"],
                                     ["warmup", "--manifest", "{m}", "--target", "cuda:90"],
                                     ["exec", "--manifest", "{m}", "--target", "cuda:90", "--", "python", "{x}"]],
                         ids=["run", "warmup", "exec"])
@pytest.mark.parametrize("flag, value", [("--connect-timeout", "-1"), ("--op-timeout", "nan"),
                                         ("--connect-timeout", "inf"), ("--op-timeout", "0")])
def test_a_store_timeout_that_is_no_deadline_is_refused_with_or_without_a_store(command, flag, value, tmp_path):
    """Refused before anything is read or run (the manifest is not even one, the program never runs)."""
    manifest, program = tmp_path / "m.json", tmp_path / "x.py"
    manifest.write_text("{}")
    program.write_text("print('ran')\n")
    args = [a.replace("{m}", str(manifest)).replace("{x}", str(program)) for a in command]
    at = args.index("--") if "--" in args else len(args)
    one_line(invoke(*args[:at], flag, value, *args[at:]), 2, f"zerojit {command[0]}: {flag} ",
             "give a positive number of seconds, at most 3600")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("args", [["--help"], ["learned", "show", "--file", "{empty}"]], ids=["help", "learned show"])
def test_standard_output_that_cannot_be_written_is_one_line_not_a_traceback(args, tmp_path):
    """Output to a full disk (/dev/full fails every write with ENOSPC), through rich (--help) and
    click's echo (a command's report): exit 1 and one line naming standard output."""
    empty = tmp_path / "learned.jsonl"
    empty.write_text("")
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "zerojit", *[a.format(empty=empty) for a in args]], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(SRC), "TRITON_CACHE_DIR": str(tmp_path)})
    assert (done.returncode, done.stderr) == (1, "zerojit: cannot write to standard output: No space left on device\n")
