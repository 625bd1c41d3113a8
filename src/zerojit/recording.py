"""Recording an unmodified program, counting its raw launches, and how its key space grows.

* :class:`Recorder` (``zerojit record``): replaces ``JITFunction.run`` for every ``triton.jit``
  function (:func:`zerojit.triton_compat.patch_run_everywhere`) by a wrapper that runs Triton's
  own binder on each launch's arguments and keeps each distinct specialization, its launch
  options and a launch count, then calls Triton's ``run``. It sees raw ``kernel[grid](...)``
  launches, ``triton.autotune`` / ``triton.heuristics`` (both call ``fn.run``; an autotuned
  launch is recorded with the chosen config's constexprs and options, which is what Triton keys
  on) and zerojit kernels whose classes are created after it is installed (``zerojit record``
  installs it before the program imports anything). Under a compile-only target a launch is a
  *dry launch*: Triton's ``run`` with ``warmup=True`` (binder, lookup, compile on a miss),
  nothing executes, so outputs are not computed. Cost while recording: one extra binder call
  per launch (a few microseconds); recording is not serving.
* :func:`count_raw_launches` (``zerojit exec``): wraps ``run`` of each function a manifest warmed
  (an instance attribute, :func:`zerojit.triton_compat.wrap_run`) so that every raw launch reports
  its ``CompiledKernel`` to zerojit's launch observer (the monitor counts hits, the audit maps
  them to warmed keys), and under a compile-only target is a dry launch instead of a refused
  real one. A kernel of the program's ``__main__``, recorded with its source
  (:mod:`zerojit.script_kernels`) and rebuilt by the warm-up, is bound to the program's own
  function at that function's first launch (``_ScriptBinding``). Cost per raw launch: one Python
  call frame, a driver check and the observer call
  (about a microsecond on top of Triton's ``run``); zerojit kernels' own launches never pass
  through it (they bind Triton's ``run`` directly).
* The manifest (:meth:`Recorder.manifest`) holds one run (the command) and, per kernel, the
  constexprs that set a shape (:mod:`zerojit.shapeflow`), for the generalisation report
  (:mod:`zerojit.generalisation`, ``zerojit record --report``).
* :class:`Program`: a ``python SCRIPT ...`` / ``python -m MODULE ...`` / ``python -c CODE ...`` /
  ``zerojit ...`` command run in this process, as ``python`` would (``runpy``).
"""

from __future__ import annotations

import builtins
import functools
import os
import re
import runpy
import sys
import threading
import types
from typing import Any, Callable, Sequence

from . import generic as _generic
from . import script_kernels as _script
from . import triton_compat as _tc
from .compile_only import (active_compile_only, compile_only, current_target_name, in_dry_benchmark,
                           refuse_interpreter)
from .context import in_warmup
from .kernel import check_hook_pins, launch_observer
from .manifest import (KernelRecord, Manifest, RecordedKernel, RecordedRun, RecordedSpecialization,
                       encode_specialization, encode_value, note_bound, note_unbound, restore_record_tunings,
                       source_changed, write_manifest)
from .recorded_tuning import LaunchRecorder
from .shapeflow import shape_parameters
from .specialization import bind, scalar_rep

__all__ = ["ProgramError", "Program", "names_this_python", "Recorder", "record_child", "count_raw_launches"]

_INT_TYPES = ("i32", "i64", "u64")


class ProgramError(ValueError):
    """A command that cannot be run as a Python program (no program, an unknown interpreter
    option, a script that does not exist); the message says what to pass instead."""


def names_this_python(word: str, *, where: str) -> bool:
    """Whether ``word``, a command's program, names this interpreter (``sys.executable``), which
    runs the program whatever the command names: True for a bare ``python``, ``python3`` or
    ``python3.N`` of this version (PATH is not searched: a console script run from a virtual
    environment that is not activated would find the system's); for this interpreter's own path
    (``os.path.abspath``, symlinks not resolved: a virtual environment's ``python`` links to the
    system one, which lacks the environment's packages); and for a path in the same folder whose
    links lead to the same file (``os.path.realpath``): ``python``, ``python3`` and ``python3.N``
    of one virtual environment or install are one interpreter, whichever of them started zerojit
    (a console script's first line names ``python3``). False for a word that names no Python
    interpreter (a script, ``zerojit``). ``where``: where the program runs, for the message
    ("this process", "a child process").

    Raises:
        ProgramError: another interpreter (``/usr/bin/python3``, ``python2``, a link to this one
            from another folder: another environment), which zerojit would not run: it names
            ``sys.executable``.
    """
    name = os.path.basename(word)
    if not re.fullmatch(r"python[0-9.]*", name):
        return False
    this = os.path.abspath(sys.executable)
    version = "%d.%d" % sys.version_info[:2]
    if word == name:
        if name in ("python", f"python{sys.version_info[0]}", f"python{version}"):
            return True
        problem = f"{word!r} is another Python than this one ({version})"
    else:
        path = os.path.abspath(word)
        if path == this or (os.path.dirname(path) == os.path.dirname(this)
                            and os.path.realpath(path) == os.path.realpath(this)):
            return True
        problem = (f"{word!r} is not this interpreter's path, nor another name of it in its folder "
                   f"{os.path.dirname(this)}")
    raise ProgramError(f"{problem}: zerojit runs the program in {where}, under its own Python {sys.executable} "
                       f"({version}); pass 'python' or that path, or run the zerojit installed for the other Python")


class Program:
    """A Python program to run in this process, from a command line.

    Accepted: ``python SCRIPT ARGS...``, ``python -m MODULE ARGS...`` and ``python -c CODE
    ARGS...`` (``python`` as :func:`names_this_python` takes it: this interpreter, by a bare name,
    its path or another name of it in its folder), ``SCRIPT.py ARGS...``, and ``zerojit ARGS...`` (``python -m zerojit``).
    ``sys.path[0]`` is what ``python`` puts there (the script's folder, else the current folder:
    :attr:`folder`), already in ``__init__``, so that a warm-up before :meth:`run` imports the
    program's kernel modules. ``where``: where it runs, for the messages
    (``zerojit exec``: this process; ``zerojit record``: a child Python process).

    Raises:
        ProgramError: an empty command, another ``python`` option, a script that does not exist,
            a ``-m`` module whose top-level package is not found, another Python interpreter than
            this one, or another executable (zerojit runs the program in a Python process it
            patches).
    """

    def __init__(self, command: Sequence[str], *, where: str = "this process") -> None:
        argv = list(command)
        accepted = "'python SCRIPT', 'python -m MODULE' or 'python -c CODE'"
        if not argv:
            raise ProgramError("no program given: pass it after '--' (e.g. -- python app.py)")
        head = os.path.basename(argv[0])
        if names_this_python(argv[0], where=where):
            argv = argv[1:]
        elif head == "zerojit":
            argv = ["-m", "zerojit", *argv[1:]]
        elif not argv[0].endswith(".py"):
            raise ProgramError(f"{argv[0]!r} is not a Python program: pass 'python SCRIPT', 'python -m MODULE', "
                               f"'python -c CODE', a .py file or 'zerojit ...' (zerojit runs the program as Python "
                               f"code, in {where})")
        if not argv:
            raise ProgramError(f"python without a script: pass {accepted}")
        self.module: str | None = None
        self.script: str | None = None
        self.code: str | None = None
        if argv[0] in ("-m", "-c"):
            if len(argv) < 2:
                raise ProgramError(f"python {argv[0]} needs {'a module name' if argv[0] == '-m' else 'the code'}")
            if argv[0] == "-m":
                self.module, self.argv = argv[1], [argv[1], *argv[2:]]
            else:
                self.code, self.argv = argv[1], ["-c", *argv[2:]]
            self.folder = os.getcwd()
            sys.path.insert(0, self.folder)
            if self.module is not None:
                self._check_module(self.module)
        elif argv[0].startswith("-"):
            raise ProgramError(f"python option {argv[0]!r} is not supported (zerojit starts the program itself, in "
                               f"{where}): pass {accepted}")
        else:
            if os.path.isdir(argv[0]):
                raise ProgramError(f"script {argv[0]!r} is a directory, not a Python file")
            if not os.path.isfile(argv[0]):
                raise ProgramError(f"script {argv[0]!r} does not exist")
            self.script, self.argv = argv[0], argv
            self.folder = os.path.dirname(os.path.abspath(argv[0]))
            sys.path.insert(0, self.folder)

    @staticmethod
    def _check_module(module: str) -> None:
        """Refuse a ``-m`` module whose top-level package is nowhere on ``sys.path``, as a missing
        script is refused (``python -m`` itself prints "No module named" and exits 1). Only the top
        level is looked up: finding a submodule would import its package, running the program's
        code before it starts."""
        import importlib.util

        top = module.split(".")[0]
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):  # a malformed name ('', '.x')
            found = False
        if not found:
            raise ProgramError(f"python -m {module}: no module named {top!r} here (not in the current folder nor "
                               "on sys.path)")

    def run(self, *, propagate: tuple[type[BaseException], ...] = ()) -> int:
        """Run the program as ``__main__`` with its ``sys.argv``, as ``python`` would; returns its
        exit status: 0 when it returned, its ``SystemExit`` code (1 for a message), or 1 for an
        exception it raised, whose traceback is printed as Python prints it (``sys.excepthook``),
        from the program's first frame on. A ``KeyboardInterrupt`` and the classes in
        ``propagate`` (errors zerojit reports itself) propagate."""
        sys.argv = list(self.argv)
        try:
            if self.module is not None:
                runpy.run_module(self.module, run_name="__main__", alter_sys=True)
            elif self.code is not None:
                self._run_code(self.code)
            else:
                runpy.run_path(self.script, run_name="__main__")
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                return e.code or 0
            print(e.code, file=sys.stderr)
            return 1
        except propagate:
            raise
        except Exception as e:
            tb = _program_frames(e.__traceback__)
            sys.excepthook(type(e), e.with_traceback(tb), tb)  # (Python's hook prints e.__traceback__)
            return 1
        return 0

    def launch_site(self, error: BaseException) -> str | None:
        """Where the launch that raised ``error`` (a compile the monitor blocked) was made, from its
        traceback: ``"app.py:12 (in main)"``, the innermost frame outside Triton, zerojit and
        ``runpy``; when that frame is a library's (Liger-Kernel's launch), followed by the
        innermost frame of the program's own files (under its :attr:`folder`, or its ``-c`` code):
        ``"…/rms_norm.py:301 (in rms_norm_forward), from app.py:9 (in <module>)"``. None when no
        frame is outside Triton and zerojit (the program is zerojit's own, ``zerojit run``)."""
        import traceback

        import triton

        inside = tuple(os.path.dirname(os.path.abspath(f)) + os.sep for f in (triton.__file__, __file__))
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if not os.path.abspath(f.filename).startswith(inside) and f.filename != runpy.__file__]
        if not frames:
            return None
        own = [f for f in frames if f.filename == "<string>"
               or os.path.abspath(f.filename).startswith(os.path.join(self.folder, ""))]

        def where(f: traceback.FrameSummary) -> str:
            return f"{f.filename}:{f.lineno} (in {f.name})"

        site = where(frames[-1])
        if own and own[-1] is not frames[-1]:
            site += f", from {where(own[-1])}"
        return site

    @staticmethod
    def _run_code(code: str) -> None:
        """``python -c CODE``: the code as the ``__main__`` module, named ``<string>`` in tracebacks."""
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        saved = sys.modules["__main__"]
        sys.modules["__main__"] = main
        try:
            exec(compile(code, "<string>", "exec"), main.__dict__)
        finally:
            sys.modules["__main__"] = saved


def _program_frames(tb: Any) -> Any:
    """A traceback without its first frames of this module and ``runpy`` (how the program was
    started, which ``python`` does not show either)."""
    while tb is not None and tb.tb_frame.f_globals.get("__name__") in (__name__, "runpy"):
        tb = tb.tb_next
    return tb


class Recorder:
    """Records every launch of every ``triton.jit`` function while installed (see the module doc).

    Thread-safe (one lock around the tables). Launches inside a zerojit warm-up launch or an
    ``allow_compiles`` block are not recorded: they are no launches of the program.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._functions: dict[int, Any] = {}
        self._specs: dict[int, dict[Any, list]] = {}  # id(fn) -> key -> [spec, values, options, count]
        self._restore: Callable[[], None] | None = None
        self._target: str | None = None  # what the first recorded launch was keyed for
        self._tunings = LaunchRecorder()  # each autotuner's tuning keys, with one launch at each

    def install(self) -> "Recorder":
        """Replace ``JITFunction.run`` and route ``Autotuner.run`` through a
        :class:`~zerojit.recorded_tuning.LaunchRecorder` (a no-op when installed). Returns self."""
        if self._restore is None:
            self._restore = _tc.patch_run_everywhere(self._wrap)
            self._tunings.install()
        return self

    def uninstall(self) -> None:
        """Put Triton's ``JITFunction.run`` and ``Autotuner.run`` back."""
        if self._restore is not None:
            self._tunings.uninstall()
            self._restore()
            self._restore = None

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        note = self._note

        def run(jit_fn: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            # Under compile_only a launch arrives (or goes on, through compile_only's own patch of
            # run) as warmup=True: a dry launch, recorded like a real one.
            if (not warmup or active_compile_only() is not None) and not in_warmup():
                note(jit_fn, args, kwargs)
            return original(jit_fn, *args, grid=grid, warmup=warmup, **kwargs)

        return run

    def _note(self, jit_fn: Any, args: tuple, kwargs: dict) -> None:
        try:
            bound, specialization, options = bind(jit_fn, *args, **dict(kwargs))
        except Exception:
            return  # the launch itself raises Triton's error for these arguments
        spec = encode_specialization(jit_fn, specialization)
        values = tuple((name, _representative(ty, attr, bound[name]))
                       for name, (ty, attr) in zip(_tc.parameter_names(jit_fn), spec)
                       if ty in _INT_TYPES or ty in ("fp32", "u1"))
        passed = tuple(_tc.run_options_removed(options).items())  # in launch order: Triton's key is str(options)
        key = (spec, passed)
        launched = 0 if in_dry_benchmark() else 1  # a compile-only tuner's benchmark: no launch of the program
        with self._lock:
            if self._target is None:
                self._target = current_target_name()
            self._functions.setdefault(id(jit_fn), jit_fn)
            table = self._specs.setdefault(id(jit_fn), {})
            entry = table.get(key)
            if entry is None:
                table[key] = [spec, values, passed, launched]
            else:
                entry[3] += launched

    def manifest(self, command: Sequence[str], *, target: str | None = None, folder: str | None = None) -> Manifest:
        """What was recorded so far, as a :class:`~zerojit.manifest.Manifest` (functions in first-
        launch order), whose target is the one the first launch was keyed for (``"cuda:90"``: a
        compile-only target or a GPU's capability); when nothing was launched, ``target`` (the
        one the program ran under), else ``"device"``. ``folder``: the program's own folder
        (:attr:`Program.folder`), where its modules imported from."""
        with self._lock:
            kernels = []
            for ident, jit_fn in self._functions.items():
                module, qualname = _tc.jit_identity(jit_fn)
                # the jit function, or an autotuner around it (a __main__ one: in the script's namespace,
                # which is no module any more once the program ended)
                held = _module_attribute(module, qualname, jit_fn.__globals__ if module == "__main__" else None)
                configs = _tc.wrapped_config_kwargs(held)
                specs = tuple(RecordedSpecialization(spec, values, options, count,
                                                     _chosen_config(configs, _tc.parameter_names(jit_fn), spec, options),
                                                     runs=(0,))
                              for spec, values, options, count in self._specs[ident].values())
                constexprs = _tc.ordered_constexpr_parameters(jit_fn)
                shapes = shape_parameters(jit_fn)
                script = _script.capture(jit_fn) if module == "__main__" and "<locals>" not in qualname else None
                kernels.append(KernelRecord(module, qualname, _tc.source_hash(jit_fn), _tc.parameter_names(jit_fn),
                                            constexprs, specs, self._tunings.tunings(held),
                                            None if shapes is None else tuple(p for p in constexprs if p in shapes),
                                            script))
        return Manifest(_tc.TRITON_VERSION, self._target or target or "device", tuple(command), tuple(kernels),
                        folder, runs=(RecordedRun(tuple(command)),))


def _module_attribute(module: str, qualname: str, namespace: dict | None = None) -> Any:
    """What the program's module (or ``namespace``, its globals) holds under the function's name
    (an autotuner, a heuristics object or the ``triton.jit`` function), or None (the module is
    gone from ``sys.modules``)."""
    first, *rest = qualname.split(".")
    obj: Any = namespace.get(first) if namespace is not None else getattr(sys.modules.get(module), first, None)
    for part in rest:
        obj = getattr(obj, part, None)
    return obj


def _chosen_config(configs: list[dict] | None, parameters: tuple[str, ...], spec: tuple,
                   options: tuple) -> tuple[tuple[str, Any], ...] | None:
    """The first autotune config whose constexprs and options this specialization carries (what
    ``Autotuner.run`` passed on), as encoded items; None without an autotuner or a match."""
    index = {name: i for i, name in enumerate(parameters)}
    passed = dict(options)
    for config in configs or ():
        if all(spec[index[k]] == ("constexpr", encode_value(v)) if k in index else passed.get(k) == v
               for k, v in config.items()):
            return tuple(sorted((k, encode_value(v)) for k, v in config.items()))
    return None


def _representative(ty: str, attr: Any, value: Any) -> Any:
    """A value of ``value``'s class: ``scalar_rep`` (unspecialized when ``attr`` is None: Triton's
    ``do_not_specialize`` int)."""
    if ty == "u1":
        return bool(value)
    return scalar_rep(value, specialize=attr is not None) if ty in _INT_TYPES else scalar_rep(float(value))


def record_child(out: str, target: str | None, command: Sequence[str]) -> int:
    """The ``zerojit record`` child process: install a :class:`Recorder` before anything of the
    program is imported, run it (under ``compile_only(target)`` when given), write the manifest
    to ``out`` even when the program fails, and return the program's exit status (130 when
    interrupted: Ctrl-C, whose traceback is not printed).

    Raises:
        ProgramError: ``command`` cannot be run as a Python program.
        InterpreterProcessError: a ``target`` with ``TRITON_INTERPRET=1`` (before anything runs:
            no manifest is written).
    """
    if target is not None:
        refuse_interpreter()
    recorder = Recorder().install()
    program = Program(command, where="a child Python process")
    _tc.watch_toolchain()  # on a GPU too: the program's compiles run ptxas under the stall rule
    try:
        if target is not None:
            with compile_only(target, machine_view=True):  # the program's probes see this machine
                return program.run()
        return program.run()
    except KeyboardInterrupt:  # Ctrl-C: zerojit record ends in one line, with no traceback of the program's
        return 130
    finally:
        recorder.uninstall()
        write_manifest(recorder.manifest(command, target=target or current_target_name(), folder=program.folder), out)


def count_raw_launches(kernels: Sequence[RecordedKernel], *, note: Callable[[str], None] | None = None,
                       serve_tuner: Callable[[KernelRecord, Any], None] | None = None,
                       on_bound: Callable[[], Any] | None = None) -> Callable[[], None]:
    """Route the raw launches of each recorded kernel's function to zerojit's launch observer
    (see the module doc); under a compile-only target they become dry launches. Returns the
    function that undoes it.

    A kernel rebuilt from a ``program_source`` (defined in the program's ``__main__``) is not
    the program's function, which does not exist yet: the program's is *bound* at its first
    launch (:class:`_ScriptBinding`), then counted like the others. A program function that
    cannot be bound (its source hash or options differ from the recorded ones: a line inserted
    above it moves its starting line, which Triton hashes) is named in one line through ``note``
    (default: stderr) and left to Triton, which compiles it as usual; the monitor's explanation of
    that compile gives the same reason (:func:`zerojit.manifest.note_unbound`), and its launches
    are counted all the same (its own counting ``run``, with no warmed variant).
    A ``triton.autotune`` object over such a function is the program's too: at its first launch
    the function is bound, its recorded choices are put into it
    (:func:`zerojit.manifest.restore_record_tunings`) and ``serve_tuner(record, tuner)`` runs
    (``zerojit exec``: the default policy, :meth:`zerojit.recorded_tuning.DefaultPolicy.install`),
    before the autotuner looks at its cache: so its first tuning key benchmarks nothing.
    A bound function gets the rebuilt one's generic variants too, then ``on_bound()`` runs
    (``zerojit exec`` in fallback mode: :func:`zerojit.serving.refresh`, so its misses are served
    by them and compiled in the background, as a module kernel's are).
    """
    wrapped = []
    scripts: dict[str, RecordedKernel] = {}
    for kernel in kernels:
        jit_fn = kernel.kernel
        _tc.wrap_run(jit_fn, _counting(kernel))
        wrapped.append(jit_fn)
        if kernel.record.program_source is not None:
            scripts.setdefault(kernel.record.qualname, kernel)
    # installed after the wrapping above: those functions' launches never pass through its hook
    binding = _ScriptBinding(scripts, note or _to_stderr, serve_tuner, on_bound) if scripts else None

    def restore() -> None:
        if binding is not None:
            wrapped.extend(binding.uninstall())
        for jit_fn in wrapped:
            _tc.unwrap_run(jit_fn)

    return restore


def _to_stderr(message: str) -> None:
    print(f"zerojit: {message}", file=sys.stderr, flush=True)


class _ScriptBinding:
    """Binds the program's ``__main__`` jit functions to the kernels a warm-up rebuilt from their
    recorded ``program_source``, each at its first launch: Triton's ``cache_key`` covers the
    function's starting line and globals that may be defined below it, so its definition is too
    early to check it.

    A class-level hook on ``JITFunction.run`` (:func:`zerojit.triton_compat.patch_run_everywhere`)
    sees the first launch of each function that has no ``run`` of its own. A ``__main__``
    function whose qualified name is a recorded one and whose ``cache_key``, parameters and
    ``triton.jit`` options are the recorded ones gets the rebuilt function's compiled variants
    (:func:`zerojit.triton_compat.adopt_compiled`: the same ``CompiledKernel`` objects, so its
    launches are hits of the warmed keys) and its own counting ``run``
    (:func:`count_raw_launches`), bound to Triton's: its later launches never reach the hook. A
    recorded one that differs gets the counting ``run`` alone (its launches are counted, its
    variants compiled by Triton). Every other function's launch costs the hook one attribute
    comparison (a ``__main__`` one: a dict lookup more).
    """

    def __init__(self, scripts: dict[str, RecordedKernel], note: Callable[[str], None],
                 serve_tuner: Callable[[KernelRecord, Any], None] | None = None,
                 on_bound: Callable[[], Any] | None = None) -> None:
        self._scripts = scripts
        self._on_bound = on_bound
        self._note = note
        self._serve_tuner = serve_tuner
        self._lock = threading.RLock()  # (a tuner's first launch binds its function under it)
        self._seen: dict[int, Any] = {}  # id -> each __main__ function looked at (kept: ids stay unique)
        self._tuners: dict[int, Any] = {}  # id -> each autotuner looked at (kept, as _seen)
        self._bound: list[Any] = []
        self._unbound: list[Any] = []  # the recorded ones not bound (manifest.note_unbound), forgotten at uninstall
        self._run: Callable[..., Any] | None = None  # JITFunction.run under the hook
        self._restore = _tc.patch_run_everywhere(self._hook)
        tuned = any(k.record.tunings or any(s.autotune_config for s in k.record.specializations)
                    for k in scripts.values())
        self._restore_tuners = _tc.patch_autotuner_run(self._tuner_hook) if tuned else None

    def _tuner_hook(self, original: Callable[..., Any]) -> Callable[..., Any]:
        tuners, serve = self._tuners, self._serve

        def run(tuner: Any, *args: Any, **kwargs: Any) -> Any:
            if id(tuner) not in tuners and serve(tuner):
                return tuner.run(*args, **kwargs)  # its own run, wrapped just now
            return original(tuner, *args, **kwargs)

        return run

    def _serve(self, tuner: Any) -> bool:
        """At an autotuner's first launch: when it is over a recorded ``__main__`` function, bind
        the function, restore its recorded choices and hand it to ``serve_tuner``; True when its
        ``run`` is now wrapped (the policy's)."""
        with self._lock:
            if id(tuner) in self._tuners:
                return False
            self._tuners[id(tuner)] = tuner
            jit_fn = _tc.unwrap_jit_function(tuner)
            kernel = self._scripts.get(getattr(jit_fn, "__qualname__", None))
            if (kernel is None or jit_fn.__module__ != "__main__" or self._run is None
                    or not self._bind(jit_fn, self._run)):
                return False
            _, notes = restore_record_tunings(kernel.record, tuner)
            for why in notes:
                self._note(why)
            if self._serve_tuner is not None:
                self._serve_tuner(kernel.record, tuner)
            return _tc.wrapped_run(tuner)

    def _hook(self, original: Callable[..., Any]) -> Callable[..., Any]:
        self._run = original
        seen, bind = self._seen, self._bind

        def run(jit_fn: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            if jit_fn.__module__ == "__main__" and id(jit_fn) not in seen:
                bind(jit_fn, original)
                if _tc.wrapped_run(jit_fn):  # a recorded one, bound or not: its own counting run, set just now
                    return jit_fn.run(*args, grid=grid, warmup=warmup, **kwargs)
            return original(jit_fn, *args, grid=grid, warmup=warmup, **kwargs)

        return run

    def _bind(self, jit_fn: Any, original: Callable[..., Any]) -> bool:
        """Bind ``jit_fn`` when it is a recorded kernel of the program; True when it was."""
        with self._lock:
            if id(jit_fn) in self._seen:
                return any(fn is jit_fn for fn in self._bound)
            self._seen[id(jit_fn)] = jit_fn
            kernel = self._scripts.get(jit_fn.__qualname__)
            if kernel is None or "<locals>" in jit_fn.__qualname__:
                return False
            record = kernel.record
            now = _tc.source_hash(jit_fn)
            options = {k: v for k, v in _tc.jit_options(jit_fn).items() if k != "repr"}
            if now != record.source_hash:
                why = source_changed(now, record.source_hash)
            elif _tc.parameter_names(jit_fn) != record.parameters:
                why = (f"its parameters {list(_tc.parameter_names(jit_fn))} differ from the recorded "
                       f"{list(record.parameters)}: record the program again")
            elif options != record.program_source["options"]:
                why = (f"its triton.jit options {options} differ from the recorded "
                       f"{record.program_source['options']}: record the program again")
            else:
                self._adopt(kernel.kernel, jit_fn)
                _tc.wrap_run(jit_fn, lambda _: _counting(kernel)(functools.partial(original, jit_fn)))
                self._bound.append(jit_fn)
                if self._on_bound is not None:
                    self._on_bound()
                return True
            note_unbound(jit_fn, why)  # the monitor's explanation of its compile says why, not "no manifest"
            # not bound, still counted: its launches (of variants Triton compiles) are the program's launches
            _tc.wrap_run(jit_fn, lambda _: _counting(kernel)(functools.partial(original, jit_fn)))
            self._unbound.append(jit_fn)
            self._note(f"{record.name}: not warmed (Triton compiles it at run time): {why}")
            return False

    @staticmethod
    def _adopt(rebuilt: Any, jit_fn: Any) -> None:
        """Make the program's ``jit_fn`` the twin of ``rebuilt`` (same ``cache_key``): its warmed
        variants, its generic variants (a miss is served as the rebuilt function's would be), its
        ``program_source`` (a background compile worker rebuilds it from there) and its name and
        keys in the monitor's explanations."""
        _tc.adopt_compiled(rebuilt, jit_fn)
        _generic.adopt(rebuilt, jit_fn)
        source = _script.program_source_of(rebuilt)
        if source is not None:
            _script.mark_rebuilt(jit_fn, source)
        note_bound(jit_fn, rebuilt)

    def uninstall(self) -> list[Any]:
        """Remove the hooks; returns the program functions wrapped, bound or not (the caller unwraps them)."""
        if self._restore_tuners is not None:
            self._restore_tuners()
        self._restore()
        for jit_fn in self._unbound:
            note_unbound(jit_fn, None)
        for jit_fn in self._bound:
            note_bound(jit_fn, None)
            _generic.forget(jit_fn)  # (its program_source mark stays: a background compile queued may read it)
        return self._bound + self._unbound


def _counting(kernel: RecordedKernel) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            if warmup or in_warmup():
                return original(*args, grid=grid, warmup=warmup, **kwargs)
            check_hook_pins()  # the monitor still in Triton's slots before a launch that may compile
            compiled = original(*args, grid=grid, warmup=active_compile_only() is not None, **kwargs)
            observer = launch_observer()
            if observer is not None and compiled is not None:
                observer(kernel, compiled)
            return compiled

        return run

    return make
