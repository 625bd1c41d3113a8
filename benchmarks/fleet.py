"""A fleet's start-up: every node compiling its key space, vs one farm push and every node pulling.

``--nodes`` processes (default 8) stand for the nodes of a fleet, each with its own new, empty
``TRITON_CACHE_DIR`` and ``TRITON_HOME`` (a node's image: nothing compiled, Triton's build
never hashed). Each warms the ``--config`` key space (default ``dsv4-like``: its keys and the
generic variants) for the compile-only ``--target`` (default ``cuda:90``: real cubins, no GPU)
through the reference runner (``zerojit run --device cpu --store URL``,
``zerojit.runner.engine.run``), then replays the first ``--requests`` requests of the shipped
trace with the runtime monitor in error mode (a runtime compile would raise):

* ``cold``: each node compiling alone, one after another (nothing shared);
* ``farm``: one process compiles the key space and publishes it as ``zerojit store push`` does
  (``registry.warmup()``, then ``zerojit.fleet.transfer.push_report``, signed), timed apart, to a
  ``redis-server`` this script starts on a free local port (no persistence) and stops afterwards;
  the key pair is made by ``zerojit store keygen`` in a temporary folder;
* ``pull``: then every node at once, ``warmup(store=URL)`` pulling the entries its cache lacks
  (each verified against the farm's public key in ``ZEROJIT_STORE_VERIFY_KEYS``). The nodes start
  together: each does its imports, then waits until all are ready before its run begins;
* ``pull-alone``: then one more node pulling with the machine to itself, as each node of a real
  fleet has its own cores (with more nodes than cores here, the ``pull`` nodes wait for a core).

A node's time is its ``warmup()`` call (``WarmupReport.seconds``: from opening the store to the
report). Not in it: the process's imports, building the model and its KV cache, and Triton's
build hashing, once per install: the first process on a new ``TRITON_HOME`` hashes
``libtriton.so`` for Triton's key (``zerojit.cache.use_fast_triton_key``, else the warm-up's
``start`` phase) and, with a store, again for the build identity the store's addresses bind
(``zerojit.cache.triton_build_hash``, else the ``store`` phase); this script does both before
the run and prints them apart. Printed per node: those hashes, the warm-up's wall and CPU
seconds (its process, compile workers and ``ptxas``), its ``store`` phases, entries pulled
(keys + generic variants) and bytes, variants compiled, runtime compiles in the replay; then per
mode the median and min-max, the ratio pull/cold (and pull-alone/cold), the farm's compile and
push, where a median node's and the lone pulling node's time went (their phases; for a pulling
node also the store phases' parts, timed by this script around ``zerojit.fleet``'s functions:
opening the store, the build identity, naming each entry, Redis GETs, verifying, installing),
and whether the goal holds: a pulling node (``pull``) is warm in at most ``--goal`` (15%) of a
cold node's time (medians), with 0 runtime compiles. The output names the cores and the load
average: other processes on a shared machine slow any mode.

Needs the ``zerojit[store]`` extra (``redis``, ``cryptography``) and ``redis-server`` on PATH;
without them it exits 2 saying which is missing.

Usage::

    PYTHONPATH=src python benchmarks/fleet.py [--nodes 8] [--requests 20] [--config dsv4-like]
        [--target cuda:90] [--goal 0.15] [--timeout 900] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REDIS_START_DEADLINE = 10.0  # seconds for redis-server to answer PING
READY_DEADLINE = 600.0  # seconds for every pulling node to finish its imports


def _phases(stats: dict | None) -> dict:
    """A ``WarmupStats.to_dict()``'s phases as ``{name: seconds}`` (None: none)."""
    return {p["phase"]: p["seconds"] for p in stats["phases"]} if stats else {}


def _compiled(stats: dict | None) -> int:
    """Variants compiled by a warm-up (this process and its workers)."""
    return stats["compiled"] + stats["worker_compiled"] if stats else 0


def _timers(store: bool) -> tuple[dict, dict]:
    """Benchmark-side timers (nothing in zerojit changes): the warm-up call's CPU seconds in this
    process (its compile workers' are in ``WarmupStats.worker_cpu_seconds``: the workers may be
    reaped after the call, so ``RUSAGE_CHILDREN`` would miss them) and, with a store, the store's parts
    summed: ``open`` (opening it: importing redis and cryptography, reading the keys), ``build``
    (the build identity, ``zerojit.fleet.entry.build_identity``), ``name``
    (naming each job's cache entry, ``zerojit.fleet.needs.entry_names``), ``get`` (Redis GETs),
    ``verify`` (decoding and checking an entry: sizes, build, signature, digests), ``install``
    (writing it into the cache folder). Returns (seconds by part, CPU seconds)."""
    import resource

    import zerojit.runner.engine as engine
    import zerojit.warmup_store as warmup_store

    parts: dict[str, float] = {}
    cpu: dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                parts[name] = parts.get(name, 0.0) + time.perf_counter() - t0
        return wrapper

    def cpu_now() -> float:
        me = resource.getrusage(resource.RUSAGE_SELF)
        return me.ru_utime + me.ru_stime

    warm_up = engine.warm_up

    def cpu_timed(*a, **k):
        c0 = cpu_now()
        try:
            return warm_up(*a, **k)
        finally:
            cpu["warm-up"] = cpu_now() - c0

    engine.warm_up = cpu_timed  # run() calls the module's warm_up
    if store:
        def instrumented(opener):
            def open_(*a, **k):
                # the store's modules (redis, cryptography) are imported here, as the opener would
                import zerojit.fleet.entry as entry
                import zerojit.fleet.store as fstore
                import zerojit.fleet.warmup as fwarmup

                entry.build_identity = timed("build", entry.build_identity)
                fwarmup.entry_names = timed("name", fwarmup.entry_names)
                fstore.RedisStore.get = timed("get", fstore.RedisStore.get)
                entry.decode = timed("verify", entry.decode)
                entry.install = timed("install", entry.install)
                return opener(*a, **k)
            return timed("open", open_)

        for scheme in ("redis", "rediss"):
            warmup_store._openers[scheme] = instrumented(warmup_store._openers[scheme])
    return parts, cpu


def child_node(args: argparse.Namespace) -> dict:
    """One node: hash Triton's build (timed apart), wait for the others if asked, then the runner."""
    from zerojit.cache import triton_build_hash, use_fast_triton_key
    from zerojit.monitor import RuntimeJitError
    from zerojit.runner.engine import RunOptions, run

    parts, cpu = _timers(bool(args.store))
    t0 = time.perf_counter()
    use_fast_triton_key()  # a new TRITON_HOME: Triton's build is hashed here, once per install
    hash_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    triton_build_hash()  # the store's build identity hashes libtriton too (remembered per install)
    build_s = time.perf_counter() - t0
    if args.ready:  # the pulling nodes start together
        with open(args.ready, "w") as f:
            f.write("ready\n")
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("node: the benchmark went away before it said go")
    options = RunOptions(config=args.config, device="cpu", target=args.target, requests=args.requests,
                         store=args.store, progress=False, jit_monitor_mode="error")
    t0 = time.perf_counter()
    try:
        report = run(options)
    except RuntimeJitError as e:  # error mode: the replay's first runtime compile raised
        return {"hash_s": hash_s, "build_s": build_s, "error": f"runtime compile: {e}"}
    wall = time.perf_counter() - t0
    warm = report.warmup.report.to_dict()
    stats, gstats, store = warm["stats"], warm["generic_stats"], warm["store"]
    phases = _phases(stats)
    for name, s in _phases(gstats).items():  # the generic variants' sweep: its store, sweep... added
        phases[f"generic {name}"] = s
    return {
        "hash_s": hash_s, "build_s": build_s, "seconds": report.warmup.seconds, "run_s": wall,
        "replay_s": report.replay_seconds,
        "keys": report.warmup.keys, "generic_variants": warm["generic_variants"],
        "compiled": _compiled(stats) + _compiled(gstats),
        "disk_loads": stats["disk_loads"] + (gstats["disk_loads"] if gstats else 0),
        "restored": stats["restored"], "phases": phases,
        "store": store, "store_keys": stats["store_entries"],
        "store_generic": (store["pulled"] - stats["store_entries"]) if store else 0,
        "runtime_compiles": report.runtime_compiles, "requests": report.requests, "ok": report.ok,
        "worker_choice": report.warmup.worker_choice, "store_parts": parts,
        # the node's CPU: this process's, plus its workers' requests (their own and ptxas')
        "cpu_s": cpu["warm-up"] + stats["worker_cpu_seconds"] + (gstats["worker_cpu_seconds"] if gstats else 0),
    }


def child_farm(args: argparse.Namespace) -> dict:
    """The farm: ``zerojit store push``'s work (warm-up, then push), each timed."""
    from zerojit.cache import triton_build_hash, use_fast_triton_key
    from zerojit.compile_only import compile_only
    from zerojit.fleet.signing import signing_key_from_env
    from zerojit.fleet.store import open_store
    from zerojit.fleet.transfer import push_report
    from zerojit.runner.config import load_config
    from zerojit.runner.engine import usable_cores
    from zerojit.runner.model import register_model

    key = signing_key_from_env()
    store = open_store(args.store)
    try:
        with compile_only(args.target):
            cfg = load_config(args.config)
            registry = register_model(cfg)
            t0 = time.perf_counter()
            use_fast_triton_key()
            hash_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            triton_build_hash()  # the build identity the push's addresses bind
            build_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            report = registry.warmup(cfg, workers=usable_cores(), progress=False, target=args.target)
            warm_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            pushed = push_report(store, report, key)
            push_s = time.perf_counter() - t0
    finally:
        store.close()
    d = report.to_dict()
    return {"hash_s": hash_s, "build_s": build_s, "seconds": warm_s, "push_s": push_s, "keys": report.num_keys,
            "generic_variants": d["generic_variants"],
            "compiled": _compiled(d["stats"]) + _compiled(d["generic_stats"]),
            "pushed": len(pushed.stored), "pushed_bytes": pushed.bytes, "already_there": len(pushed.present),
            "summary": pushed.summary()}


def _child_cmd(mode: str, args: argparse.Namespace, store: str | None, ready: str | None) -> list[str]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--config", args.config, "--target", args.target,
           "--requests", str(args.requests)]
    return cmd + (["--store", store] if store else []) + (["--ready", ready] if ready else [])


def _node_env(root: str, name: str, extra: dict) -> dict:
    cache, home = os.path.join(root, name, "cache"), os.path.join(root, name, "home")
    os.makedirs(cache)
    os.makedirs(home)
    return dict(os.environ, TRITON_CACHE_DIR=cache, TRITON_HOME=home, **extra)


def _result(name: str, proc_out: str, proc_err: str, rc: int) -> dict:
    lines = proc_out.strip().splitlines()
    if rc or not lines:
        sys.exit(f"{name} failed (exit {rc}):\n{proc_out[-3000:]}\n{proc_err[-3000:]}")
    out = json.loads(lines[-1])
    if "error" in out:
        sys.exit(f"{name}: {out['error']}")
    return dict(out, node=name)


def run_child(name: str, mode: str, root: str, args: argparse.Namespace, store: str | None, env: dict) -> dict:
    """One process, to its end (``--timeout`` seconds at most)."""
    try:
        proc = subprocess.run(_child_cmd(mode, args, store, None), env=_node_env(root, name, env), capture_output=True,
                              text=True, timeout=args.timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        sys.exit(f"{name}: no result within --timeout {args.timeout:g} s\n{(e.stderr or b'')[-3000:]!r}")
    return _result(name, proc.stdout, proc.stderr, proc.returncode)


def run_together(names: list[str], root: str, args: argparse.Namespace, store: str, env: dict) -> list[dict]:
    """``names`` as processes started at once: each imports, says it is ready, then all are told go."""
    procs = []

    def stderr_of(name: str) -> str:
        with open(os.path.join(root, f"{name}.stderr"), errors="replace") as f:
            return f.read()

    try:
        for name in names:
            ready = os.path.join(root, f"{name}.ready")
            with open(os.path.join(root, f"{name}.stderr"), "w") as err:  # a file: a chatty node never blocks
                procs.append((name, ready, subprocess.Popen(
                    _child_cmd("node", args, store, ready), env=_node_env(root, name, env), stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=err, text=True)))
        deadline = time.monotonic() + READY_DEADLINE
        while not all(os.path.exists(r) for _, r, _ in procs):
            dead = [n for n, r, p in procs if p.poll() is not None and not os.path.exists(r)]
            if dead or time.monotonic() > deadline:
                name, _, p = next((x for x in procs if x[0] in dead), procs[0])
                p.kill()
                p.wait(30)
                sys.exit(f"{name} never got ready (exit {p.returncode}):\n{stderr_of(name)[-3000:]}")
            time.sleep(0.05)
        for _, _, p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        deadline = time.monotonic() + args.timeout
        results = []
        for name, _, p in procs:
            try:
                out, _ = p.communicate(timeout=max(deadline - time.monotonic(), 1.0))
            except subprocess.TimeoutExpired:
                sys.exit(f"{name}: no result within --timeout {args.timeout:g} s")
            results.append(_result(name, out, stderr_of(name), p.returncode))
        return results
    finally:
        for _, _, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's pick for an ephemeral bind)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(folder: str) -> tuple[subprocess.Popen, str]:
    """A ``redis-server`` on a free local port (no persistence), answering PING; its URL."""
    import redis

    port = free_port()
    log = open(os.path.join(folder, "redis.log"), "wb")
    proc = subprocess.Popen([shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", folder], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
    deadline = time.monotonic() + REDIS_START_DEADLINE
    try:
        while True:
            try:
                client.ping()
                return proc, url
            except redis.RedisError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    stop(proc)
                    with open(os.path.join(folder, "redis.log"), errors="replace") as f:
                        tail = f.read()[-300:]
                    sys.exit(f"redis-server did not answer within {REDIS_START_DEADLINE:g} s on port {port}: {tail}")
                time.sleep(0.05)
    finally:
        client.close()


def stop(proc: subprocess.Popen) -> None:
    """Stop a process this script started (terminate, then kill after 5 s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def missing_requirement() -> str | None:
    """Why this benchmark cannot run here (the redis or cryptography package, redis-server), or None."""
    for module in ("redis", "cryptography"):
        try:
            __import__(module)
        except ImportError:
            return f"the {module} package is not installed (pip install 'zerojit[store]')"
    if shutil.which("redis-server") is None:
        return "no redis-server on PATH (Debian: apt-get install redis-server)"
    return None


def positive(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def fraction(text: str) -> float:
    """An argparse type: a number > 0 and <= 1."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number > 0 and <= 1")
    return value


def seconds(text: str) -> float:
    """An argparse type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=positive, default=8, help="node processes per mode (default 8)")
    parser.add_argument("--requests", type=positive, default=20, help="trace requests each node replays (default 20)")
    parser.add_argument("--config", default="dsv4-like", help="the model config whose key space is warmed")
    parser.add_argument("--target", default="cuda:90", help="compile-only target (default cuda:90)")
    parser.add_argument("--goal", type=fraction, default=0.15,
                        help="a pulling node's warm-up over a cold one's, at most (default 0.15)")
    parser.add_argument("--timeout", type=seconds, default=900.0, help="seconds a process may take (default 900)")
    parser.add_argument("--json", help="also write every node's result here")
    parser.add_argument("--child", choices=("node", "farm"), help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--ready", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child_node(args) if args.child == "node" else child_farm(args)))
        return
    from zerojit.outputs import output_problem, write_output

    if args.json and (problem := output_problem(args.json)):  # not after minutes of measuring
        parser.error(f"--json {args.json}: cannot write there: {problem}")
    why = missing_requirement()
    if why:
        print(f"benchmarks/fleet.py: {why}", file=sys.stderr)
        sys.exit(2)

    started, load = time.perf_counter(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="zerojit-fleet-bench-") as root:
        keys = os.path.join(root, "keys")
        try:
            made = subprocess.run([sys.executable, "-m", "zerojit", "store", "keygen", "-o", keys], capture_output=True,
                                  text=True, timeout=120, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            sys.exit("zerojit store keygen: no result within 120 s")
        if made.returncode:
            sys.exit(f"zerojit store keygen failed (exit {made.returncode}): {made.stderr.strip()}")
        signing = {"ZEROJIT_STORE_SIGNING_KEY": os.path.join(keys, "zerojit-store.key")}
        verify = {"ZEROJIT_STORE_VERIFY_KEYS": os.path.join(keys, "zerojit-store.pub")}

        cold = [run_child(f"cold-{i}", "node", root, args, None, {}) for i in range(args.nodes)]
        redis_proc, url = start_redis(root)
        try:
            farm = run_child("farm", "farm", root, args, url, signing)
            pulls = run_together([f"pull-{i}" for i in range(args.nodes)], root, args, url, verify)
            alone = run_child("pull-alone", "node", root, args, url, verify)
        finally:
            stop(redis_proc)
    report(cold, farm, pulls, alone, args, time.perf_counter() - started, load)


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"


def report(cold: list, farm: dict, pulls: list, alone: dict, args: argparse.Namespace, wall: float,
           load: float) -> None:
    """Print every node, then the medians, the ratio, the farm, a pulling node's phases and the goal."""
    first = cold[0]
    print(f"{args.nodes} nodes, config {args.config!r} for compile-only target {args.target} (no GPU: nothing loaded): "
          f"{first['keys']} keys + {first['generic_variants']} generic variants per node; {os.cpu_count()} CPUs "
          f"(pulling nodes share them); each node then replays {first['requests']} requests, monitor in error mode")
    print(f"{'node':<11}{'key s':>7}{'build s':>9}{'warm-up s':>11}{'CPU s':>7}{'store s':>9}{'pulled':>9}{'MB':>7}"
          f"{'compiled':>10}{'runtime compiles':>18}")
    for r in cold + pulls + [alone]:
        store = r["store"]
        pulled = f"{r['store_keys']}+{r['store_generic']}" if store else "-"
        mb = f"{store['bytes'] / 1e6:.1f}" if store else "-"
        store_s = f"{r['phases'].get('store', 0.0) + r['phases'].get('generic store', 0.0):.2f}" if store else "-"
        print(f"{r['node']:<11}{r['hash_s']:>7.2f}{r['build_s']:>9.2f}{r['seconds']:>11.2f}{r['cpu_s']:>7.2f}"
              f"{store_s:>9}{pulled:>9}{mb:>7}{r['compiled']:>10}{r['runtime_compiles']:>18}")
    print("key s, build s: Triton's build hashed on the node's new TRITON_HOME (Triton's key; libtriton's SHA-256 "
          "for the store's build identity), before (not in) its warm-up, once per install; CPU s: the "
          "warm-up's CPU seconds (the node's process, and its compile workers' requests with ptxas); store s: its "
          "store phases (keys, generic variants); pulled: keys + generic variants from the store; compiled: "
          "variants compiled by the warm-up (keys and generic)")
    c = [r["seconds"] for r in cold]
    p = [r["seconds"] for r in pulls]
    ratio = statistics.median(p) / statistics.median(c)
    print(f"cold (each alone, one after another): {_spread(c)}; CPU {_spread([r['cpu_s'] for r in cold])}")
    print(f"pull ({args.nodes} at once):               {_spread(p)}; CPU {_spread([r['cpu_s'] for r in pulls])}")
    print(f"farm: compiled {farm['compiled']} variants in {farm['seconds']:.2f} s (build hashes {farm['hash_s']:.2f} + "
          f"{farm['build_s']:.2f} s apart), pushed in {farm['push_s']:.2f} s: {farm['summary']}")
    moved = sum(r["store"]["bytes"] for r in pulls)
    entries = sum(r["store"]["pulled"] for r in pulls)
    missing = sum(r["store"]["missing"] for r in pulls)
    refused = sum(len(r["store"]["refused"]) for r in pulls)
    down = [r["store"]["down"] for r in pulls if r["store"]["down"]]
    print(f"moved: {moved / 1e6:.1f} MB to {len(pulls)} nodes ({entries} entries; {missing} missing, {refused} refused"
          + (f"; store down: {down[0]}" if down else "") + ")")
    runtime = sum(r["runtime_compiles"] for r in cold + pulls + [alone])
    compiled = sum(r["compiled"] for r in pulls + [alone])
    print(f"runtime compiles after warm-up, all {len(cold) + len(pulls) + 1} nodes: {runtime}; variants compiled by "
          f"pulling nodes: {compiled}")
    mid = sorted(pulls, key=lambda r: r["seconds"])[len(pulls) // 2]
    for what, r in (("a median pulling node's", mid), ("the pulling node alone's", alone)):
        print(f"where {what} warm-up went ({r['node']}, {r['seconds']:.2f} s): "
              + ", ".join(f"{n} {s:.2f}" for n, s in r["phases"].items() if s >= 0.005) + f"; {r['worker_choice']}")
        print("  its store phases' parts (summed): " + ", ".join(f"{n} {s:.2f}" for n, s in r["store_parts"].items())
              + f"; the warm-up's CPU {r['cpu_s']:.2f} s of {r['seconds']:.2f} s wall")
    mid_cold = sorted(cold, key=lambda r: r["seconds"])[len(cold) // 2]
    print(f"where a median cold node's warm-up went ({mid_cold['node']}, {mid_cold['seconds']:.2f} s): "
          + ", ".join(f"{n} {s:.2f}" for n, s in mid_cold["phases"].items() if s >= 0.005)
          + f"; {mid_cold['worker_choice']}")
    holds = ratio <= args.goal and runtime == 0 and compiled == 0
    print(f"ratio pull/cold (medians): {100 * ratio:.1f}%; goal (a pulling node warm in <= {100 * args.goal:.0f}% of a "
          f"cold node's time, 0 runtime compiles): {'holds' if holds else 'does NOT hold'}")
    print(f"pull-alone/cold (a pulling node with the machine to itself, over the cold median): "
          f"{100 * alone['seconds'] / statistics.median(c):.1f}%")
    print(f"benchmark wall time {wall:.0f} s; the machine's 1-minute load average {load:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end (other processes share its cores)")
    if args.json:
        write_output(args.json, json.dumps({"args": vars(args), "cold": cold, "farm": farm, "pull": pulls,
                                            "pull_alone": alone, "ratio": ratio, "goal_holds": holds, "wall_s": wall},
                                           indent=2))


if __name__ == "__main__":
    main()
