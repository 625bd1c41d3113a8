"""A warmed cache damaged in each way zerojit must survive, then served: is the damage found, is the
entry compiled again, does the run still finish with no runtime compile?

One cold ``zerojit run`` fills a Triton home of its own (the main job: the reference runner on the
shipped trace, compile-only for ``--target``, CPU dry launches). Its cache folder is kept as a
pristine copy; for each case the copy is laid back at the same path (the restore index records
absolute entry folders, so the cache never moves), damaged, and served again with

    zerojit run --device cpu --target cuda:90 --jit-monitor-mode error --json R

The cases (one file each; the entry damaged is the one of a kernel every decode step launches,
``_prepare_uniform_decode_kernel``, so a damaged variant would be used on the request path):

* ``none``: nothing damaged (the baseline: restored, nothing compiled);
* the restore index: one flipped bit, cut to half, 64 random bytes, JSON of another schema;
* the cubin: cut to half, one flipped bit; the same half cubin with zerojit's digests removed
  (a file zerojit sees for the first time: only the structural check can catch it);
* the metadata JSON: ``num_warps`` raised by one (still valid JSON);
* the group file (``__grp__*.json``): one byte made invalid UTF-8, with the restore index applying,
  with ``ZEROJIT_RESTORE=0``, and with the index deleted;
* Triton 3.6's launcher ``.so`` of the entry's signature, cut to half (only where one was built:
  compile-only warm-ups build none, the case then says so);
* the entry's digests file emptied, and one flipped bit in its cubin (damaged digests must not
  hide the damage, nor record the damaged cubin's digest);
* the cubin replaced by a FIFO (a plain ``open`` blocks forever) and by a folder (Triton's
  rewrite of the entry failed onto it).

Printed: one row per case: ``detected`` (the warm-up report names the damaged file), ``recompiled``
(keys compiled in this run, in this process or in workers), the exit status, the runtime compiles
the monitor counted, and the report's first line about the damage. Every run has a deadline
(``--timeout``, 600 s): a hung run is a row that says so, never a benchmark that waits forever.

Usage: ``PYTHONPATH=src python benchmarks/faults.py [--target cuda:90] [--config NAME] [--json OUT]``
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable

KERNEL = "_prepare_uniform_decode_kernel"  # launched by every decode step


def _entry_file(cache: str, suffix: str) -> str:
    """The one file ``KERNEL + suffix`` of the cache (the damaged entry's)."""
    found = sorted(glob.glob(os.path.join(cache, "*", KERNEL + suffix)))
    if not found:
        raise SystemExit(f"faults: no {KERNEL}{suffix} in {cache}: did the warm-up compile it?")
    return found[0]


def _group_file(cache: str) -> str:
    found = sorted(glob.glob(os.path.join(cache, "*", f"__grp__{KERNEL}.json")))
    if not found:
        raise SystemExit(f"faults: no group file of {KERNEL} in {cache}")
    return found[0]


def _index_files(cache: str) -> list[str]:
    return sorted(glob.glob(os.path.join(cache, ".zerojit", "restore-*")))


def _flip_bit(path: str) -> str:
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x02
    open(path, "wb").write(bytes(data))
    return path


def _cut_half(path: str) -> str:
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    return path


def _index(damage: Callable[[str], object]) -> Callable[[str], str]:
    def apply(cache: str) -> str:
        files = _index_files(cache)
        if not files:
            raise SystemExit(f"faults: no restore index in {cache}/.zerojit")
        damage(files[0])
        return files[0]
    return apply


def _random_bytes(path: str) -> None:
    open(path, "wb").write(random.Random(28).randbytes(64))


def _other_schema(path: str) -> None:
    open(path, "w").write(json.dumps({"format": "not this one", "entries": 5}))


def _num_warps_plus_one(cache: str) -> str:
    path = _entry_file(cache, ".json")
    meta = json.load(open(path))
    meta["num_warps"] += 1
    open(path, "w").write(json.dumps(meta))
    return path


def _bad_group_byte(cache: str) -> str:
    path = _group_file(cache)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] = 0xFF  # never valid in UTF-8
    open(path, "wb").write(bytes(data))
    return path


def _bad_group_byte_no_index(cache: str) -> str:
    for index in _index_files(cache):
        os.remove(index)
    return _bad_group_byte(cache)


def _half_cubin_first_seen(cache: str) -> str:
    shutil.rmtree(os.path.join(cache, ".zerojit", "digests"), ignore_errors=True)
    return _cut_half(_entry_file(cache, ".cubin"))


def _digests_emptied_bit_flipped(cache: str) -> str:
    cubin = _flip_bit(_entry_file(cache, ".cubin"))
    path = os.path.join(cache, ".zerojit", "digests", os.path.basename(os.path.dirname(cubin)) + ".json")
    open(path, "wb").close()
    return path


def _cubin_replaced(make: Callable[[str], object]) -> Callable[[str], str]:
    def apply(cache: str) -> str:
        path = _entry_file(cache, ".cubin")
        os.remove(path)
        make(path)
        return path
    return apply


def _half_launcher(cache: str) -> str | None:
    found = sorted(glob.glob(os.path.join(cache, "*", "*launcher*.so")))
    return _cut_half(found[0]) if found else None


# (name, damage(cache) -> the damaged file or None when the case does not apply, extra environment)
CASES: list[tuple[str, Callable[[str], str | None], dict]] = [
    ("none", lambda cache: None, {}),
    ("index: one flipped bit", _index(_flip_bit), {}),
    ("index: cut to half", _index(_cut_half), {}),
    ("index: 64 random bytes", _index(_random_bytes), {}),
    ("index: JSON of another schema", _index(_other_schema), {}),
    ("cubin: cut to half", lambda cache: _cut_half(_entry_file(cache, ".cubin")), {}),
    ("cubin: one flipped bit", lambda cache: _flip_bit(_entry_file(cache, ".cubin")), {}),
    ("cubin: cut to half, no digest", _half_cubin_first_seen, {}),
    ("metadata: num_warps + 1", _num_warps_plus_one, {}),
    ("group file: bad byte", _bad_group_byte, {}),
    ("group file: bad byte, ZEROJIT_RESTORE=0", _bad_group_byte, {"ZEROJIT_RESTORE": "0"}),
    ("group file: bad byte, index deleted", _bad_group_byte_no_index, {}),
    ("launcher .so: cut to half", _half_launcher, {}),
    ("digests: emptied, cubin one flipped bit", _digests_emptied_bit_flipped, {}),
    ("cubin: a FIFO", _cubin_replaced(os.mkfifo), {}),
    ("cubin: a folder", _cubin_replaced(os.mkdir), {}),
]


def _serve(args: argparse.Namespace, home: str, report: str, extra: dict) -> tuple[int | str, dict | None, float]:
    """One ``zerojit run`` in ``home``: (exit status or "timed out", its JSON report, seconds)."""
    env = {**os.environ, "TRITON_HOME": home, **extra}
    env.pop("TRITON_CACHE_DIR", None)
    command = [sys.executable, "-m", "zerojit", "run", "--device", "cpu", "--target", args.target,
               "--jit-monitor-mode", "error", "--json", report, "--no-progress"]
    if args.config:
        command += ["--config", args.config]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return "timed out", None, time.perf_counter() - start
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        print(f"  (exit {done.returncode}; last lines: {' | '.join(done.stderr.strip().splitlines()[-3:])})")
    try:
        data = json.load(open(report))
    except (OSError, ValueError):
        data = None
    return done.returncode, data, seconds


def _about(damaged: str, warmup: dict) -> str | None:
    """The report's first line that names the damaged file (its name, or its entry folder's)."""
    lines = list(warmup.get("stats", {}).get("recovered", [])) + [str(f) for f in warmup.get("failures", [])]
    names = {os.path.basename(damaged)}
    for line in lines:
        if any(name in line for name in names):
            return line.splitlines()[0]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="cuda:90", help="compile-only target (default cuda:90)")
    parser.add_argument("--config", default=None, help="runner config (default: zerojit run's)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds each run may take (default 600)")
    parser.add_argument("--json", default=None, help="also write the rows as JSON to this file")
    args = parser.parse_args()
    if not args.timeout > 0:  # refused before the cold run
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    from zerojit.outputs import output_problem, write_output

    if args.json and (problem := output_problem(args.json)):  # not after minutes of measuring
        parser.error(f"--json {args.json}: cannot write there: {problem}")

    work = tempfile.mkdtemp(prefix="zerojit-faults-")
    home = os.path.join(work, "home")
    cache = os.path.join(home, ".triton", "cache")
    pristine = os.path.join(work, "pristine")
    code, data, seconds = _serve(args, home, os.path.join(work, "cold.json"), {})
    if code != 0 or data is None:
        raise SystemExit(f"faults: the cold run failed (exit {code})")
    print(f"cold run: {data['warmup']['stats']['compiled'] + data['warmup']['stats']['worker_compiled']} keys "
          f"compiled in {seconds:.1f} s; cache {cache}")
    shutil.copytree(cache, pristine, symlinks=True)

    rows = []
    for name, damage, extra in CASES:
        shutil.rmtree(cache)
        shutil.copytree(pristine, cache, symlinks=True)
        damaged = damage(cache)
        if damaged is None and name != "none":
            rows.append({"case": name, "applies": False})
            continue
        code, data, seconds = _serve(args, home, os.path.join(work, "report.json"), extra)
        warmup = (data or {}).get("warmup", {})
        stats = warmup.get("stats", {})
        line = _about(damaged, warmup) if damaged else None
        line = line.replace(cache + os.sep, "") if line else None  # entry folders, not this run's temporary path
        rows.append({"case": name, "applies": True, "file": os.path.relpath(damaged, cache) if damaged else None,
                     "detected": line is not None, "report_line": line,
                     "recompiled": stats.get("compiled", 0) + stats.get("worker_compiled", 0) if data else None,
                     "restored": stats.get("restored") if data else None,
                     "exit": code, "runtime_compiles": (data or {}).get("runtime_compiles"), "seconds": round(seconds, 2)})
    shutil.rmtree(work, ignore_errors=True)

    print(f"\n{'case':42} {'detected':>8} {'recompiled':>10} {'exit':>5} {'runtime compiles':>16}  report")
    for row in rows:
        if not row["applies"]:
            print(f"{row['case']:42} {'(no such file in this cache: case does not apply)'}")
            continue
        detected = "-" if row["file"] is None else ("yes" if row["detected"] else "NO")
        print(f"{row['case']:42} {detected:>8} {str(row['recompiled']):>10} {str(row['exit']):>5} "
              f"{str(row['runtime_compiles']):>16}  {(row['report_line'] or '')[:110]}")
    if args.json:
        write_output(args.json, json.dumps(rows, indent=2))
    failed = [r["case"] for r in rows if r["applies"] and (r["exit"] != 0 or r["runtime_compiles"] != 0
                                                            or (r["file"] and not r["detected"]))]
    print(f"\n{len(rows) - len(failed)} of {len(rows)} cases held" + (f"; not: {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
