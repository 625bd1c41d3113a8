"""Run each warmed key's launch path once, dry, at the end of warm-up.

A process's first launch of a kernel costs several times a steady one even when its variant is
compiled and loaded: the code on the launch path runs for the first time (Triton's binder and
``JITFunction.run`` for that function, zerojit's plan and fast launcher for that call site, the
``__call__`` body, the autotuner's pruning and the nearest-key lookup of a tuning key never seen),
and that first run is slow (the interpreter's specialization, the lookups and caches it fills).
:func:`zerojit.loading.prime_launch_path` pays the per-process part with one real launch of a
one-element kernel; what stays is per kernel and per call site, and is paid here, per warmed key,
with the key's own warm-up inputs (meta tensors) and nothing launched:

1. ``__call__``'s body (a checked launcher's checks and memo too) and, for a wrapped kernel, the
   heuristics and the key's autotune config, exactly as at a launch;
2. the plan of its ``LaunchSpec.kwargs`` names; with the fast path on, its fast launcher in its
   select mode (``SELECT``: it finds the entry and launches nothing), and on a GPU the entry's
   launcher call resolved (:func:`zerojit.triton_compat.direct_launch`), as its first launch would;
3. otherwise Triton's ``JITFunction.run(..., warmup=True)`` through the plan, but only once
   Triton's own binder and key show the variant is in the in-process cache, so nothing compiles
   (a meta tensor is 16-byte aligned unless its warm-up input says otherwise, as the real one);
4. once per autotuned kernel, :data:`NEW_KEY_RUNS` times: what a launch at a tuning key never
   tuned runs (the table's miss, the autotuner's pruning, the nearest tuned key among the
   survivors or the first surviving config, the choice remembered), at tuning keys no launch can
   make, each record removed after (not under ``TuningPolicy('error')``: a new key raises there).

Measured on the CI machine (Python 3.11, compile-only dry launches, fresh processes, the one-element
primer launched first as on a GPU): ``zerojit.examples.tuned_scale``'s first launch 75-120 us ->
29-34 us and its first launch at a new tuning key 64-82 us -> 42-54 us, against 14 us steady;
``zerojit.examples.scale_add``'s first launch of its second warmed key 2.4-2.6x -> 1.5-1.7x steady.
On an H100 (``benchmarks/autotune.py --rounds 6``, steps 1-4 with one new-key run, primed vs
unprimed in each round): the tuned kernel's first launch 2.58x steady (spread 2.41-2.79) against
3.23x (3.03-3.68), its first launch at a new tuning key 2.56x (2.38-3.07) against 2.98x
(2.84-3.04). With 8 new-key runs, the new tuning key's first launch 2.30x (1.85-2.56) against
2.58x with one run and 2.90x unprimed (6 rounds of fresh processes, host and decision timed
apart: the first new key's decision 37-40 us against 45-54 us and 54-65 us on quiet rounds);
``autotune.py --rounds 3`` 2.40x (2.36-2.49) against 2.89x (2.87-3.38) unprimed.
Priming costs the warm-up about 0.09 ms per key (10 ms for ``benchmarks/warmup.py``'s 111 keys).

Tried and not kept: launching each primed key for real at warm-up into a CUDA graph captured on
a stream of its own and dropped unlaunched (the launcher and the driver's launch call run, no
kernel does). In the same ``autotune.py --rounds 3`` call it made the first launches slower than
steps 1-4 alone: a new tuning key's 2.67x (2.60-2.77) against 2.40x, the kernel's first 2.80x
against 2.59x, and it doubled the priming's cost (21 ms for the 111 keys).

Nothing here changes what a launch does: a key whose prime raises (a check that refuses a meta
tensor, a heuristic that reads data) is skipped and its first launch is as before. The kernel's
own code runs again per key (``warmup_inputs``, ``__call__``, heuristics) and its prune functions
up to ``1 + NEW_KEY_RUNS`` times; a config's ``pre_hook`` never runs. Set
``ZEROJIT_PRIME_KERNELS=0`` to skip priming (for A/B measurements).
"""

from __future__ import annotations

from typing import Any

from . import triton_compat as _tc
from .autotune import TunedKey
from .context import allow_compiles
from ._launch import SELECT
from .kernel import _FORCED_CONFIG  # the launch path's own state
from .kernel import TritonJitKernel, note_driver
from .switches import switch

__all__ = ["NEW_KEY_RUNS", "PRIME_ENV", "PRIME_LIMIT", "prime_kernel", "priming_disabled"]

#: ``ZEROJIT_PRIME_KERNELS=0`` (or off/false/no: :func:`zerojit.switches.switch`) skips
#: :func:`prime_kernel` for the process.
PRIME_ENV = "ZEROJIT_PRIME_KERNELS"
#: The most keys primed per kernel: each costs tens of microseconds after the first.
PRIME_LIMIT = 1024


def priming_disabled() -> bool:
    """True when :data:`PRIME_ENV` turns priming off.

    Raises:
        zerojit.switches.SwitchSettingError: it holds neither an on nor an off value.
    """
    return not switch(PRIME_ENV)


def prime_kernel(kernel: Any, keys: list) -> int:
    """Run the launch path of each of ``keys`` (warmed keys of ``kernel``) dry, as a first
    launch would run it, launching and compiling nothing (see the module doc).

    Args:
        kernel: a :class:`~zerojit.kernel.TritonJitKernel` whose keys warmed (anything else,
            or no active driver, primes nothing).
        keys: its warmed keys (:class:`~zerojit.autotune.TunedKey` for an autotune config);
            the first :data:`PRIME_LIMIT` are primed.

    Returns: how many keys were primed (not counted: a key whose prime raised, one whose grid is
    empty, one whose variant Triton's run would have to compile or whose function has
    ``pre_run_hooks``). Never raises for a kernel's own errors: priming is an optimization only.
    """
    if not isinstance(kernel, TritonJitKernel) or priming_disabled() or _tc.interpreting():
        return 0
    drv = _tc.peek_driver()  # not a hot path: Triton's driver slot through triton_compat
    state = kernel._launch_state
    if drv is None or state is None or not hasattr(type(kernel).__call__, "_zerojit_method"):
        return 0
    dry = note_driver(drv)
    with allow_compiles():  # still the warm-up: a recording or a monitor sees no launch here
        return _prime_keys(kernel, state, drv, dry, keys[:PRIME_LIMIT])


def _prime_keys(kernel: Any, state: Any, drv: Any, dry: bool, keys: list) -> int:
    primed = 0
    wrapping = kernel._wrapping
    untuned = wrapping is not None and wrapping.tunes
    specs: dict[Any, tuple[Any, tuple]] = {}  # base key -> its unwrapped spec: the same for each config
    for key in keys:
        base = key.key if isinstance(key, TunedKey) else key
        forced = _FORCED_CONFIG.set(key.config if isinstance(key, TunedKey) else None)
        try:
            if base not in specs:
                specs[base] = kernel._declared_spec(kernel.warmup_inputs(base))
            spec, values = specs[base]
            if untuned:  # once per kernel: its code is what is primed, not a key
                untuned = False
                try:
                    _prime_untuned_choice(kernel, spec, values)
                except Exception:  # a prune function that refuses meta tensors: this key still primes
                    pass
            if wrapping is not None:
                spec = kernel._wrapped_spec(spec, values, hooks=False)
            if 0 in spec.grid:
                continue
            if _prime_launch(kernel, state, drv, dry, spec, values):
                primed += 1
        except Exception:  # a check or heuristic that refuses meta tensors: its first launch pays
            continue
        finally:
            _FORCED_CONFIG.reset(forced)
    return primed


def _prime_launch(kernel: Any, state: Any, drv: Any, dry: bool, spec: Any, values: tuple) -> bool:
    """The launch entry's calls (the plan used last, which finds the plan of these names): the
    fast launcher in select mode, else Triton's run of a cached variant."""
    sk = spec.kwargs
    entry = state.fast_call(SELECT, drv, spec.grid, sk, *values) if kernel.fast_path else None
    if entry is not None:
        if not dry and entry.direct is None:  # what its first real launch resolves: the launcher's C entry
            entry.resolve()
        return True
    if _tc.has_pre_run_hooks(state.jit_fn):  # they would see meta tensors
        return False
    args, options, _ = state.plan(tuple(sk)).args(sk, *values)
    if state.cached(args, options, _tc.current_device())[2] is None:
        return False  # run(warmup=True) would compile it
    if dry:  # Triton's run asks driver.active for the device: the target's (as a dry launch does)
        with _tc.target_scope():
            state.run_call(spec.grid, True, sk, *values)
    else:
        state.run_call(spec.grid, True, sk, *values)
    return True


#: How many times the new-tuning-key path runs per autotuned kernel (about 30 us each): the
#: interpreter specializes a function's bytecode only after it ran a few times (Python 3.11: 8
#: calls), so one run leaves the first real new key paying for that.
NEW_KEY_RUNS = 8
_BEYOND_ARGUMENTS = 1 << 64  # no int a launch passes reaches it (Triton takes ints of at most 64 bits)


def _prime_untuned_choice(kernel: Any, spec: Any, values: tuple) -> None:
    """What a launch at a tuning key the table lacks runs, :data:`NEW_KEY_RUNS` times: the
    wrapping's resolve with the launch path's own choice (the table and remembered-choice misses,
    the policy's choice: the autotuner's pruning for these arguments, the nearest tuned key among
    the survivors or the first surviving config, the choice remembered and put in the autotuner's
    cache), at tuning keys no launch can make (:func:`_unseen_tuning_keys`); each record is removed
    after. Nothing under ``TuningPolicy('error')`` (a new tuning key raises). A tuning key without
    an int entry runs the choice once at this key's tuning key, nothing recorded."""
    wrapping = kernel._wrapping
    if type(kernel).tuning.untuned == "error":  # a new tuning key raises TuningError: no path to prime
        return
    named = kernel._named_args(spec, values)
    tuning_key, call = wrapping.tuning_key(named)
    fakes = _unseen_tuning_keys(kernel, tuning_key, NEW_KEY_RUNS)
    if not fakes:
        kernel._choose_untuned(tuning_key, lambda: wrapping.survivors(*wrapping.autotuner_call(call, spec.grid)),
                               record=False)
        return
    choices = type(kernel)._untuned_choice
    unforced = _FORCED_CONFIG.set(None)  # the launch path's own choice, not a warm-up's forced config
    try:
        for fake in fakes:
            try:
                wrapping.resolve(named, lambda _key, survivors, args: kernel._choose_config(fake, survivors, args),
                                 spec.grid)
            finally:
                choices.pop(fake, None)
                _tc.drop_autotuner_cache(wrapping.tuner, fake)
    finally:
        _FORCED_CONFIG.reset(unforced)


def _unseen_tuning_keys(kernel: Any, tuning_key: tuple, count: int) -> list[tuple]:
    """Up to ``count`` tuning keys like ``tuning_key`` that no launch can make (each int entry
    moved past 2**64 by 1, 2, ...: a Triton int argument is at most 64 bits; bools stay) and that
    the kernel's tuning table, its remembered choices and its autotuner's cache lack."""
    cls = type(kernel)
    if not any(type(v) is int for v in tuning_key):
        return []
    taken = (cls._tuning_table, cls._untuned_choice)
    out: list[tuple] = []
    for step in range(1, 4 * count + 1):
        fake = tuple(_BEYOND_ARGUMENTS + step if type(v) is int else v for v in tuning_key)
        if not any(fake in t for t in taken) and not _tc.autotuner_cached(kernel._wrapping.tuner, fake):
            out.append(fake)
            if len(out) == count:
                break
    return out
