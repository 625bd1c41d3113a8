"""Generic variants made by the warm-up (``registry.warmup(generic=True)``, :mod:`zerojit.generic`).

Every check is against Triton itself: the classes Triton's binder gives the generic function
(``triton_compat.generic_function``) for launches of a group, the ``CompiledKernel`` it filed
(its ``src.attrs``: no divisibility assumption), its compilation listener (compiles vs disk
loads) and the cache entries it wrote, not zerojit's bookkeeping alone.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import json
import re
import subprocess
import sys

import torch
import triton
import triton.language as tl
from triton import knobs

import _generic_kernels as K
from zerojit import generic, triton_compat
from zerojit.cache import export_bundle, import_bundle
from zerojit.compile_only import compile_only
from zerojit.generic import generic_classes, generic_function_of, group_of
from zerojit.kernel import KernelDefinitionError
from zerojit.manifest import (KernelRecord, Manifest, RecordedKey, RecordedSpecialization, encode_classes,
                              encode_specialization, write_manifest)
from zerojit.registry import JitWarmupRegistry
from zerojit.specialization import WarmupTensor, bind, spec_classes

ENTRY = re.compile(r"^[A-Z2-7]{52}$")


def _functions():
    """Every triton.jit function of the test kernels and the generic functions made of them."""
    fns = [K._add_n_kernel, K._fill_kernel, K._scale_kernel, K._halve_kernel]
    return fns + [g for fn in fns for g in fn.__dict__.get("_zerojit_generic", {}).values()]


def forget_in_process() -> None:
    """Drop Triton's in-process caches of the test kernels (and their generic functions) and the
    process's table of generic variants: what a new process starts from (the disk cache stays)."""
    for fn in _functions():
        fn.device_caches.clear()
    generic.forget()


@pytest.fixture(autouse=True)
def co(tmp_path, monkeypatch):
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "cache"))
    forget_in_process()
    with compile_only("cuda:90") as drv:
        yield drv
    forget_in_process()


@pytest.fixture
def events(monkeypatch):
    """Triton's compilation listener: one ``cache_hit`` per compile (False) or disk load (True)."""
    seen: list[bool] = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda *, cache_hit, **_: seen.append(cache_hit))
    return seen


def warm(*registrations, **options):
    """A registry warm-up of ``(kernel, request)`` pairs."""
    reg = JitWarmupRegistry()
    for kernel, request in registrations:
        reg.register(kernel, **request)
    return reg.warmup(progress=False, **options)


def entries() -> set[str]:
    folder = knobs.cache.dir
    return {e for e in os.listdir(folder) if ENTRY.match(e)}


def binder_classes(jit_fn, *args):
    """The classes Triton's own binder gives ``jit_fn`` for a launch with ``args``."""
    _, spec, _ = bind(jit_fn, *args)
    return spec_classes(jit_fn, spec)


def add_n_args(n, stride=1, aligned=True):
    x = WarmupTensor(torch.float32, (64,), aligned=aligned)
    return (x, WarmupTensor(torch.float32, (64,), aligned=aligned), n, stride, 64)


def lookup_for(jit_fn, keep, *args):
    """The generic variant serving's lookup finds for a launch of ``jit_fn`` with ``args``: its
    group from Triton's binder on the specialized function (what a miss gives serving)."""
    _, spec, options = bind(jit_fn, *args)
    key = triton_compat.in_process_key(spec, options)
    return generic.lookup(jit_fn, triton_compat.current_device(), group_of(jit_fn, spec_classes(jit_fn, spec), key, keep))


# -- generic classes: what Triton's binder gives the generic function --------------------------

@triton.jit
def _classes_kernel(x_ptr, y_ptr, n, stride, m: tl.int64, u: tl.uint8, f, flag, none_arg, B: tl.constexpr):
    pass


INTS = [1, 16, 17, 0, -16, 2**31 - 1, 2**31, 2**31 + 16, 2**32 + 1, 2**63 - 16, 2**63, 2**63 + 1, 2**64 - 16]


@pytest.mark.parametrize("keep", [(), ("stride",), ("n", "stride")])
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("value", INTS)
def test_generic_classes_are_what_tritons_binder_gives_the_generic_function(value, aligned, keep):
    """For each int class and width (1, divisible by 16, other; i32, i64, u64), an annotated i64
    and uint8, an aligned or misaligned pointer, a float, a bool, None and a constexpr: the classes
    zerojit computes from the specialized key equal Triton's binder on the generic function."""
    x = WarmupTensor(torch.float16, (64,), aligned=aligned)
    y = WarmupTensor(torch.float32, (64,), aligned=not aligned)
    args = (x, y, value, value, min(value, 2**63 - 1), 200, 1.5, True, None, 8)
    specialized = binder_classes(_classes_kernel, *args)
    gf = generic_function_of(_classes_kernel, keep)
    reference = binder_classes(gf, *args)
    assert generic_classes(_classes_kernel, specialized, keep) == reference
    assert all(c.attr is None for c, p in zip(reference, _classes_kernel.params)  # no value class survives
               if not p.is_constexpr and p.name not in keep and c.type != "constexpr")
    # the warm-up's generic kernel builds arguments in exactly those classes (Triton's binder says)
    kernel = generic._generic_kernel("classes", _classes_kernel, keep)
    inputs = kernel.warmup_inputs(RecordedKey(encode_classes(reference)))
    assert kernel.kernel is gf and binder_classes(gf, *(inputs[p.name] for p in gf.params)) == reference


# -- contract kernels ------------------------------------------------------------------------------

def test_one_generic_variant_per_group_serves_every_value_class(events):
    """Keys n=16 and n=17 (one group: i32, same dtypes, constexprs, options) get exactly one
    generic variant, compiled once; it is what serving's lookup finds for launches of the group
    in classes no key warmed (n = 1, 1000, a stride of 2, misaligned tensors), its classes are
    Triton's for the generic function and it assumes no divisibility."""
    report = warm((K.AddN(), dict(ns=(16, 17))))
    assert report.num_keys == 2 and report.generic_variants == 1 and len(events) == 3  # 2 keys + 1 generic
    assert "warm-up: 2 keys + 1 generic variant over 1 kernel" in report.summary()
    assert "generic variants: 1 compiled in this process" in report.summary()
    d = report.to_dict()
    assert d["keys"] == 2 and d["generic_variants"] == 1 and d["generic_stats"]["compiled"] == 1
    assert d["stats"]["compiled"] == 2  # the keys' own counts: the generic variant is apart
    # the generic pass's wall time, a phase of the keys' stats (what benchmarks/warmup.py takes out
    # of the keys' parallel efficiency), covers the generic pass's own phases
    phases = dict(report.stats.phases)
    assert phases["generic"] >= sum(s for _, s in report.generic_stats.phases) > 0
    (variant,) = report.generic
    assert variant.generic and variant.kernel == "add_n [generic]" and variant not in report.variants
    gf = generic_function_of(K._add_n_kernel)
    assert variant.specialization == binder_classes(gf, *add_n_args(1000, 2, aligned=False))
    assert variant.specialization[2:4] == (generic.SpecClass("i32", None),) * 2
    assert not any("tt.divisibility" in str(v) for v in variant.compiled.src.attrs.values())
    for args in (add_n_args(1), add_n_args(1000), add_n_args(16, 2), add_n_args(17, aligned=False)):
        assert lookup_for(K._add_n_kernel, (), *args) is variant.compiled
    assert lookup_for(K._add_n_kernel, (), *add_n_args(2**32)) is None  # i64: another group, none warmed


def test_int_widths_make_separate_groups():
    report = warm((K.AddN(), dict(ns=(16, 17, 2**32 + 16, 2**32 + 1))))
    assert report.num_keys == 4 and report.generic_variants == 2
    widths = sorted(v.specialization[2].type for v in report.generic)
    assert widths == ["i32", "i64"]
    assert lookup_for(K._add_n_kernel, (), *add_n_args(2**33 + 5)).hash == next(
        v.compiled.hash for v in report.generic if v.specialization[2].type == "i64")


def test_generic_false_makes_none(events):
    report = warm((K.AddN(), dict(ns=(16,))), generic=False)
    assert report.generic == () and report.generic_stats is None and len(events) == 1
    assert "generic" not in dict(report.stats.phases)
    assert "generic" not in report.summary() and report.to_dict()["generic_variants"] == 0
    assert generic.generic_functions() == () and lookup_for(K._add_n_kernel, (), *add_n_args(17)) is None


def test_a_group_whose_warmed_variant_is_generic_costs_nothing(events):
    """Fill's only parameters are do_not_specialize already: its warmed variant is its generic
    variant, filed as it is (the same CompiledKernel), with no second compile."""
    report = warm((K.Fill(), {}))
    assert len(events) == 1 and report.generic_variants == 1
    (variant,) = report.generic
    assert variant.compiled is report.variants[0].compiled and variant.generic
    assert report.generic_stats.total_compiled == 0
    assert "generic variants: 1 warmed key variant (already generic)" in report.summary()
    assert lookup_for(K._fill_kernel, (), WarmupTensor(torch.int32, (4,), aligned=False), 1) is variant.compiled


def test_generic_keep_keeps_the_equal_to_one_class():
    """generic_keep=("stride",): strides 1 and 5 are two groups, the first's generic variant
    keeps Triton's ("constexpr", 1), the other's has stride as a plain i32 (not specialized on
    divisibility), as Triton's binder gives the generic function made with that keep."""
    report = warm((K.AddNKeepStride(), dict(ns=(16,), strides=(1, 5, 32))))
    assert report.num_keys == 3 and report.generic_variants == 2
    gf = generic_function_of(K._add_n_kernel, ("stride",))
    one, other = report.generic
    assert one.specialization == binder_classes(gf, *add_n_args(17, 1, aligned=False))
    assert one.specialization[3] == generic.SpecClass("constexpr", 1)
    assert other.specialization == binder_classes(gf, *add_n_args(17, 48)) == binder_classes(gf, *add_n_args(3, 5))
    assert lookup_for(K._add_n_kernel, ("stride",), *add_n_args(1000, 1)) is one.compiled
    assert lookup_for(K._add_n_kernel, ("stride",), *add_n_args(1000, 7)) is other.compiled


def test_a_generic_keep_name_that_is_no_plain_parameter_is_refused():
    for bad, why in (("strid", "no parameter"), ("BLOCK", "a tl.constexpr parameter")):
        with pytest.raises(KernelDefinitionError, match=rf"BadKeep: generic_keep names '{bad}', {why} of kernel "
                                                        r"_add_n_kernel\(x_ptr, out_ptr, n, stride, BLOCK\)"):
            type("BadKeep", (K.AddN,), {"kernel": K._add_n_kernel, "generic_keep": (bad,)})
    with pytest.raises(KernelDefinitionError, match="generic_keep must be a tuple of parameter names, not 'stride'"):
        type("BadKeep", (K.AddN,), {"kernel": K._add_n_kernel, "generic_keep": "stride"})


def test_a_generic_variant_that_fails_to_compile_is_a_note_not_a_failure():
    """FirstN compiles only with n in Triton's equal-to-one class (tl.arange needs a constant):
    its key warms, its generic variant fails; the warm-up succeeds, the note says which and why,
    and nothing is filed for the group (a miss there compiles as before)."""
    report = warm((K.FirstN(), {}), (K.AddN(), dict(ns=(16,))))
    assert report.ok and report.num_keys == 2 and report.generic_variants == 1  # AddN's only
    (note,) = report.generic_stats.recovered
    assert note.startswith("first_n [generic]: no generic variant for RecordedKey(*i32:nospec, i32:nospec): ")
    assert "arange" in note and "note: first_n [generic]: no generic variant" in report.summary()
    assert lookup_for(K._first_n_kernel, (), WarmupTensor(torch.int32, (4,)), 1) is None


# -- autotune, heuristics, manifests ---------------------------------------------------------------

def test_an_autotuned_kernel_gets_one_generic_variant_per_config():
    report = warm((K.Scale(), dict(ns=(16, 17))))
    assert report.num_keys == 4 and report.generic_variants == 2  # 2 configs x (n=16, n=17) keys
    by_block = {v.specialization[4].attr: v for v in report.generic}
    assert sorted(by_block) == [32, 64]
    for config in K.CONFIGS:  # each config's launch options (num_warps) and BLOCK: its own group
        v = by_block[config.kwargs["BLOCK"]]
        assert f"'num_warps': {config.num_warps}" in generic.options_text(v.triton_key)
        assert v.specialization[2] == generic.SpecClass("i32", None) and v.specialization[5].attr is True


def test_a_heuristics_kernel_gets_one_per_heuristic_value():
    report = warm((K.Halve(), dict(ns=(16, 48, 17))))
    assert report.num_keys == 3 and report.generic_variants == 2  # EVEN True (16, 48) and False (17)
    assert sorted(v.specialization[2].attr for v in report.generic) == [False, True]
    gf = generic_function_of(K._halve_kernel)
    for v in report.generic:
        assert v.specialization == binder_classes(gf, WarmupTensor(torch.int32, (16,), aligned=False), 1000,
                                                  v.specialization[2].attr)


def test_a_manifest_warm_up_gets_generic_variants(tmp_path):
    """Recorded specializations (n=16 and n=17 of one group, and n=2**32) of a triton.jit function
    warmed from a manifest: one generic variant per group, named after the recorded kernel."""
    fn = K._add_n_kernel
    specs = []
    for n in (16, 17, 2**32):
        _, spec, _ = bind(fn, *add_n_args(n))
        specs.append(RecordedSpecialization(encode_specialization(fn, spec), (("n", n), ("stride", 1)), (), 1))
    record = KernelRecord(fn.fn.__module__, fn.fn.__qualname__, triton_compat.source_hash(fn),
                          triton_compat.parameter_names(fn), ("BLOCK",), tuple(specs))
    path = tmp_path / "m.json"
    write_manifest(Manifest(triton_compat.TRITON_VERSION, "cuda:90", ("prog",), (record,)), path)
    report = JitWarmupRegistry().warmup(manifest=path, progress=False)
    assert report.num_keys == 3 and report.generic_variants == 2 and not report.skipped
    assert {v.kernel for v in report.generic} == {"_generic_kernels._add_n_kernel [generic]"}
    assert lookup_for(fn, (), *add_n_args(1, 2, aligned=False)) is not None
    assert lookup_for(fn, (), *add_n_args(2**32 + 3)) is not None


# -- workers, warm restart, bundles ----------------------------------------------------------------

REGISTRATIONS = ((K.AddN(), dict(ns=(16, 17, 2**32))), (K.Scale(), dict(ns=(16,))), (K.Halve(), dict(ns=(16, 17))))


def _generic_facts(report):
    return [(v.kernel, v.key, v.triton_key, v.specialization, v.compiled.hash) for v in report.generic]


def test_workers_make_the_generic_variants_a_serial_warm_up_makes(tmp_path, monkeypatch):
    serial = warm(*REGISTRATIONS, workers=1)
    serial_entries = entries()
    forget_in_process()
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "parallel"))
    parallel = warm(*REGISTRATIONS, workers=2)
    assert serial.generic_variants == parallel.generic_variants == 6
    assert _generic_facts(serial) == _generic_facts(parallel)
    assert entries() == serial_entries  # the workers wrote the very entries (generic ones included)
    s = parallel.generic_stats
    assert (s.worker_compiled, s.compiled, s.workers) == (6, 0, 2)


def test_a_warm_restart_restores_generic_variants_with_no_compile(events):
    cold = warm(*REGISTRATIONS)
    compiled = len(events)
    assert cold.generic_variants == 6 and compiled == cold.num_keys + 6
    forget_in_process()
    warm_report = warm(*REGISTRATIONS)
    assert len(events) == compiled  # Triton's listener: nothing compiled, nothing looked up on disk
    assert warm_report.generic_stats.restored == 6 and warm_report.stats.restored == cold.num_keys
    assert _generic_facts(warm_report) == _generic_facts(cold)
    assert "generic variants: 6 restored from the disk cache by zerojit's restore index" in warm_report.summary()
    assert lookup_for(K._add_n_kernel, (), *add_n_args(1, 3, aligned=False)) is not None


def test_a_second_process_restores_generic_variants_with_no_compile(tmp_path):
    """A fresh interpreter on the same cache folder (the restore index's real use)."""
    warm(*REGISTRATIONS)
    script = (
        "import sys, json; sys.path.insert(0, {tests!r})\n"
        "from triton import knobs\n"
        "knobs.cache.dir = {cache!r}\n"
        "seen = []\n"
        "knobs.compilation.listener = lambda *, cache_hit, **_: seen.append(cache_hit)\n"
        "import _generic_kernels as K\n"
        "from zerojit.compile_only import compile_only\n"
        "from zerojit.registry import JitWarmupRegistry\n"
        "from zerojit import generic\n"
        "with compile_only('cuda:90'):\n"
        "    reg = JitWarmupRegistry()\n"
        "    reg.register(K.AddN(), ns=(16, 17, 2**32)); reg.register(K.Scale(), ns=(16,))\n"
        "    reg.register(K.Halve(), ns=(16, 17))\n"
        "    r = reg.warmup(progress=False)\n"
        "print(json.dumps([len(seen), r.generic_variants, r.generic_stats.restored, len(generic.generic_functions())]))\n"
    ).format(tests=os.path.dirname(__file__), cache=knobs.cache.dir)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TRITON_INTERPRET": "0"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == [0, 6, 6, 3]


def _entry_of(compiled) -> str:
    return os.path.basename(os.path.dirname(next(iter(triton_compat.compiled_files(compiled).values()))))


def test_a_bundle_carries_the_generic_variants(tmp_path, monkeypatch, events):
    built = warm(*REGISTRATIONS)
    path = tmp_path / "b.tar.gz"
    manifest = export_bundle(built, path, target="cuda:90")
    assert {_entry_of(v.compiled) for v in built.generic} <= set(manifest.entries)
    assert {manifest.entries[_entry_of(v.compiled)]["kernel"] for v in built.generic} == {
        "add_n [generic]", "scale [generic]", "halve [generic]"}
    forget_in_process()
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "elsewhere"))
    import_bundle(path, target="cuda:90")
    events.clear()
    report = warm(*REGISTRATIONS)
    assert report.generic_variants == 6 and events == [True] * (report.num_keys + 6)  # disk loads only
    assert report.generic_stats.total_compiled == 0 and report.generic_stats.disk_loads == 6


def test_generic_variants_are_no_keys_of_the_audit():
    """The audit's dead-warm-up check reads a report's keys: a generic variant never launched is
    no dead warm-up, and no generic kernel is a kernel of the report or of the audit."""
    from zerojit.audit import build_audit
    from zerojit.monitor import JitMonitor

    report = warm((K.AddN(), dict(ns=(16, 17))))
    assert report.generic_variants == 1 and all(not v.generic for v in report.variants)
    assert [k.kernel for k in report.kernels] == ["add_n"]
    audit = build_audit(report, JitMonitor("warn", report=report))
    assert [k.kernel for k in audit.kernels] == ["add_n"] and audit.dead_warmups == 2  # the two keys only


def _rank(rank: int, init_file: str, caches: list[str], out: str) -> None:
    """One rank of a two-rank gloo group warming REGISTRATIONS (test_distributed_warmup's pattern)."""
    os.environ["TRITON_CACHE_DIR"] = caches[rank]
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    seen: list[bool] = []
    knobs.compilation.listener = lambda *, cache_hit, **_: seen.append(cache_hit)
    with compile_only("cuda:90"):
        report = warm(*REGISTRATIONS, group=dist.group.WORLD)
        found = lookup_for(K._add_n_kernel, (), *add_n_args(1, 3, aligned=False))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"compiled": seen.count(False), "keys": report.num_keys, "generic": report.generic_variants,
                   "generic_restored": report.generic_stats.restored, "found": found is not None}, f)
    dist.destroy_process_group()


def test_ranks_of_a_group_compile_each_generic_variant_once(tmp_path):
    """Two ranks with their own cache folders: the generic jobs are sharded like the keys (each
    compiled on one rank, the other restores it from that rank's records), every rank files all."""
    import torch.multiprocessing as mp

    caches = [str(tmp_path / "cache0"), str(tmp_path / "cache1")]
    mp.spawn(_rank, args=(str(tmp_path / "init"), caches, str(tmp_path)), nprocs=2, join=True)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    keys = results[0]["keys"]
    assert [(r["keys"], r["generic"], r["found"]) for r in results] == [(keys, 6, True)] * 2
    assert sum(r["compiled"] for r in results) == keys + 6  # every key and generic variant compiled once
    assert sum(r["generic_restored"] for r in results) == 6  # each rank restores the other's share


@triton.jit
def _source_swapped_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def test_a_generic_function_shares_its_kernels_source_hash_as_tritons_own_walk_gives_it():
    """The generic function takes the kernel's source lines and ``cache_key`` instead of reading
    and walking them again (``triton_compat._source_lines_of``): what it took is what Triton's own
    walk of the generic function's source gives, and ``inspect.getsourcelines`` is Python's again
    after it."""
    import inspect

    real = inspect.getsourcelines
    for fn in (K._add_n_kernel, K._halve_kernel):
        gf = triton_compat.generic_function(fn)
        assert inspect.getsourcelines is real
        assert gf.hash == fn.cache_key  # taken, not computed on first use
        assert (gf.src, gf.starting_line_number, gf.raw_src) == (fn.src, fn.starting_line_number, fn.raw_src)
        taken, taken_globals = gf.cache_key, gf.used_global_vals
        assert taken == fn.cache_key and taken_globals == fn.used_global_vals
        assert taken_globals is not fn.used_global_vals
        gf.hash = None  # Triton's own walk of the generic function, from its source
        assert gf.cache_key == taken and gf.used_global_vals == taken_globals
        assert [p.do_not_specialize for p in gf.params] == [not p.is_constexpr for p in fn.params]


def test_a_kernel_whose_source_was_replaced_gets_no_generic_function_of_its_file():
    """Triton's ``_unsafe_update_src`` (a test or tool patching a kernel's source): the generic
    function is made from the source lines Triton read when the kernel was made, its
    ``cache_key`` walked and compared, and refused."""
    fn = _source_swapped_kernel
    original = fn.src
    fn._unsafe_update_src(original.replace("+ 1, mask", "+ 2, mask"))
    try:
        with pytest.raises(ValueError, match="hashes to another cache_key"):
            triton_compat.generic_function(fn)
    finally:
        fn._unsafe_update_src(original)
    assert triton_compat.generic_function(fn).cache_key == fn.cache_key


_OFFSET = tl.constexpr(5)


@triton.jit
def _global_reading_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + _OFFSET, mask=offs < n)


def test_a_kernel_whose_global_changed_since_its_hash_gets_no_generic_function():
    """A constexpr global the kernel reads, reassigned after its ``cache_key`` was computed: the
    generic function walks its own source (Triton's hash of the new value) and is refused, as
    Triton refuses the kernel's next launch ("Global variable ... has changed")."""
    global _OFFSET
    fn = _global_reading_kernel
    assert fn.cache_key and fn.used_global_vals
    _OFFSET = tl.constexpr(7)
    try:
        with pytest.raises(ValueError, match="hashes to another cache_key"):
            triton_compat.generic_function(fn)
    finally:
        _OFFSET = tl.constexpr(5)
    gf = triton_compat.generic_function(fn)
    assert gf.hash == fn.cache_key and gf.used_global_vals == fn.used_global_vals


def test_a_changed_kernel_names_its_generic_variants_apart_from_its_keys(events, monkeypatch):
    """The generic index's line counts generic variants (never keys), once per generic kernel."""
    from zerojit import restore

    cold = warm(*REGISTRATIONS)
    forget_in_process()
    monkeypatch.setattr(restore._tc, "source_hash", lambda jit_fn: "0" * 64)  # every function "edited"
    again = warm(*REGISTRATIONS)
    assert again.stats.restored == 0 and again.generic_stats.restored == 0
    lines = [r.split(": ", 1)[1] for r in again.stats.recovered + again.generic_stats.recovered if "not restored" in r]
    generic_lines = [line for line in lines if " [generic]'" in line]
    assert sum(int(line.split()[0]) for line in generic_lines) == cold.generic_variants == 6
    assert all(re.match(r"\d+ generic variants? of kernel '.+ \[generic\]' not restored: its triton.jit function's "
                        r"source, .+ changed since the index was written; warmed up through Triton's lookup instead$",
                        line) for line in generic_lines), generic_lines
    key_lines = [line for line in lines if line not in generic_lines]
    assert sum(int(line.split()[0]) for line in key_lines) == cold.num_keys
    assert all(" key" in line.split(" of kernel ")[0] for line in key_lines), key_lines
