"""Kernels defined in the program's ``__main__``: carried in a manifest by their source.

A script's ``triton.jit`` functions do not exist before the program runs, so no warm-up can
import them. ``zerojit record`` keeps what compiling one needs instead, as the manifest's
per-kernel ``program_source`` (``docs/manifest.md``), made by :func:`capture`:

* the function's source as Triton hashes it (``JITFunction.src``, from ``def`` on), its file,
  the line its source block starts at (Triton's ``starting_line_number``, part of its
  ``cache_key``), the line of its ``def``, its qualified name and the ``triton.jit`` options
  that change its compile or its binder;
* each global its body reads (the names Triton's dependency finder looks up in the function's
  ``__globals__``), as a JSON constexpr value (``{"value": 64, "constexpr": true}``: a
  ``tl.constexpr(64)``), an importable object (``{"import": "triton.language:"}``: a module;
  ``{"import": "pkg.mod:helper"}``: an object that module holds, checked to be the same), or
  another ``__main__`` jit function by its own ``program_source`` (``{"script": {...}}``; one
  already being captured further up, a recursion, by its qualified name: ``{"script": "f"}``).
  Anything else cannot be carried: the record gets ``skipped``, naming the global, and a
  warm-up skips the kernel with that reason.

:class:`Rebuilder` turns it back into a ``triton.jit`` function for a warm-up: the globals into
one namespace per manifest (the program's ``__main__`` was one namespace too), the source
compiled as if at its recorded lines (blank lines above it, one placeholder decorator line per
recorded decorator line), so Triton sees the same source and starting line and computes the same
``cache_key``; the caller checks that it does. (The line information in a kernel compiled from
it names a private file, ``<zerojit program_source FILE:LINE QUALNAME>``, registered in
``linecache``: Triton reads the source through ``inspect``, and the program's own file may have
changed since.)

Building the function runs its ``def`` and a compile runs its constexpr code: a manifest that
carries source is code, trusted like the program (:func:`writable_by_others` is what a reader
refuses).
"""

from __future__ import annotations

import __future__
import ast
import builtins
import importlib
import linecache
import math
import os
import stat
import sys
from types import ModuleType
from typing import Any

import triton
import triton.language as tl

from . import triton_compat as _tc

__all__ = ["ScriptError", "capture", "validate", "Rebuilder", "mark_rebuilt", "program_source_of", "imported_modules",
           "writable_by_others",
           "skipped_reason"]

_KINDS = ("value", "import", "script")  # how a global is carried


class ScriptError(ValueError):
    """A ``program_source`` that cannot be rebuilt here (an import that fails or resolves to
    something else, a global recorded twice with two values, a source that does not define the
    function); the message names the global or what failed."""


def capture(jit_fn: Any, _stack: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``program_source`` of ``jit_fn``, a ``triton.jit`` function of the program's
    ``__main__`` defined at its top level (see the module doc). When a global cannot be carried
    (or ``triton.jit`` was given a ``repr`` callable) it is ``{"qualname": ..., "skipped":
    reason}`` instead, the reason naming the global."""
    fn = jit_fn.fn
    options = _tc.jit_options(jit_fn)
    if options.pop("repr", False):  # (it names the compiled kernel)
        return {"qualname": fn.__qualname__, "skipped": "triton.jit was given a repr callable, which a manifest "
                "cannot carry"}
    src, line, def_line = _tc.jit_source(jit_fn)
    data: dict[str, Any] = {"qualname": fn.__qualname__, "filename": fn.__code__.co_filename, "line": line,
                            "def_line": def_line, "source": src,
                            "future_annotations": bool(fn.__code__.co_flags & __future__.annotations.compiler_flag),
                            "options": options, "globals": {}}
    stack = (*_stack, fn.__qualname__)
    for name in _global_names(src):
        if name not in fn.__globals__:
            continue  # a builtin, or a name the program never defined
        encoded, why = _encode(fn.__globals__[name], stack)
        if why is not None:  # (nothing else is kept: the kernel is never rebuilt)
            return {"qualname": fn.__qualname__, "skipped": f"global {name!r} {why}"}
        data["globals"][name] = encoded
    return data


def _global_names(src: str) -> list[str]:
    """The names ``src`` (one ``def``) reads that are not its parameters or names it assigns, in
    first-read order: the globals Triton's dependency finder looks up (its body, annotations and
    default values)."""
    fdef = ast.parse(src).body[0]
    args = fdef.args
    local = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                             *(a for a in (args.vararg, args.kwarg) if a is not None))}
    local |= {n.id for n in ast.walk(fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    names = [n.id for n in ast.walk(fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return [n for n in dict.fromkeys(names) if n not in local]


def _json_scalar(value: Any) -> bool:
    return value is None or type(value) in (bool, int, str) or type(value) is float and math.isfinite(value)


def _encode(value: Any, stack: tuple[str, ...]) -> tuple[dict[str, Any] | None, str | None]:
    """``(entry, None)``, or ``(None, why)`` for a value a manifest cannot carry."""
    if isinstance(value, tl.constexpr):
        inner = value.value
        if _json_scalar(inner):
            return {"value": inner, "constexpr": True}, None
        if type(inner) is tl.dtype:
            return {"value": {"triton_dtype": str(inner)}, "constexpr": True}, None
        return None, f"is tl.constexpr({_brief(inner)}), whose value is not a JSON scalar or a tl.dtype"
    if _json_scalar(value):
        return {"value": value}, None
    if type(value) is tl.dtype:
        return {"value": {"triton_dtype": str(value)}}, None
    if isinstance(value, ModuleType):
        if value.__name__ != "__main__" and sys.modules.get(value.__name__) is value:
            return {"import": f"{value.__name__}:"}, None
        return None, f"is the module {value.__name__!r}, which is not importable by that name"
    if _tc.is_jit_function(value) and value.fn.__module__ == "__main__":
        qualname = value.fn.__qualname__
        if "<locals>" in qualname:
            return None, f"is the jit function {qualname!r}, defined inside a function"
        if qualname in stack:
            return {"script": qualname}, None  # a recursion: captured further up
        nested = capture(value, stack)
        if "skipped" in nested:
            return None, f"is the __main__ jit function {qualname!r}, which cannot be carried: {nested['skipped']}"
        return {"script": nested}, None
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str) and module != "__main__" and "<locals>" not in qualname:
        if _resolve(module, qualname, imported_only=True) is value:
            return {"import": f"{module}:{qualname}"}, None
    return None, (f"is a {type(value).__module__}.{type(value).__qualname__} ({_brief(value)}), which a manifest "
                  "cannot carry (a JSON constexpr value, an object importable from a module other than __main__, or "
                  "another __main__ jit function can be): make it a tl.constexpr or move it into a module")


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _resolve(module: str, qualname: str, *, imported_only: bool = False) -> Any:
    """What ``module`` holds under ``qualname`` (None: nothing); ``imported_only``: look in
    ``sys.modules`` only (recording: importing runs code). Raises ImportError when the module
    does not import."""
    obj: Any = sys.modules.get(module) if imported_only else importlib.import_module(module)
    for part in filter(None, qualname.split(".")):
        obj = getattr(obj, part, None)
    return obj


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def validate(data: Any, where: str) -> None:
    """Check a ``program_source`` object read from a manifest; ``where``: the field, for messages.

    Raises:
        ValueError: a field missing or of the wrong type, a global that is not one of the three
            forms, naming the field.
    """
    def need(name: str, kind: type | tuple[type, ...], what: str) -> Any:
        value = data.get(name)
        if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
            raise ValueError(f"{where}: field {name!r} must be {what}")
        return value

    if not isinstance(data, dict):
        raise ValueError(f"{where}: must be an object, not {type(data).__name__}")
    if "skipped" in data:
        need("skipped", str, "a string")
        need("qualname", str, "a string")
        return
    for name in ("qualname", "filename", "source"):
        need(name, str, "a string")
    line = need("line", int, "an int >= 1")
    if line < 1 or need("def_line", int, "an int >= line") < line:
        raise ValueError(f"{where}: fields 'line' and 'def_line' must be ints with 1 <= line <= def_line")
    need("future_annotations", bool, "a bool")
    options = need("options", dict, "an object")
    unknown = sorted(set(options) - set(_tc.JIT_OPTIONS))
    if unknown:
        raise ValueError(f"{where}: field 'options' holds {unknown}, which are no triton.jit options zerojit carries")
    for name, value in need("globals", dict, "an object").items():
        gw = f"{where}.globals.{name}"
        if not isinstance(value, dict) or len(set(value) & set(_KINDS)) != 1:
            raise ValueError(f"{gw}: must be an object with one of {list(_KINDS)}")
        if "import" in value and not (isinstance(value["import"], str) and ":" in value["import"]):
            raise ValueError(f"{gw}: field 'import' must be 'module:qualname'")
        if "value" in value:
            inner = value["value"]
            if not (_json_scalar(inner) or isinstance(inner, dict) and set(inner) == {"triton_dtype"}
                    and isinstance(inner["triton_dtype"], str)):
                raise ValueError(f"{gw}: field 'value' must be a JSON scalar or a triton_dtype")
            if not isinstance(value.get("constexpr", False), bool):
                raise ValueError(f"{gw}: field 'constexpr' must be a bool")
        if "script" in value and not isinstance(value["script"], str):
            validate(value["script"], f"{gw}.script")


def skipped_reason(data: dict[str, Any] | None) -> str | None:
    """Why a recorded ``program_source`` cannot be warmed (its ``skipped`` field, in words), or
    None."""
    if data is None or "skipped" not in data:
        return None
    return (f"defined in the program's __main__, and its {data['skipped']}; a warm-up cannot rebuild it: record the "
            "program again once it can")


def writable_by_others(st: os.stat_result) -> str | None:
    """Why a file with status ``st`` is not trusted as code, or None: other users can write to it
    (it is group- or world-writable, or owned by another user than this process's, root excepted)."""
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is {'world' if st.st_mode & stat.S_IWOTH else 'group'}-writable (mode {stat.filemode(st.st_mode)})"
    if hasattr(os, "getuid") and st.st_uid not in (os.getuid(), 0):
        return f"it is owned by another user (uid {st.st_uid})"
    return None


# ---------------------------------------------------------------------------------------------
# Rebuilding
# ---------------------------------------------------------------------------------------------


class Rebuilder:
    """Rebuilds ``program_source`` objects into ``triton.jit`` functions, all in one namespace
    (the program's ``__main__`` as far as the recorded globals go); each function once, by
    qualified name."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self._built: dict[str, Any] = {}
        self._origin: dict[str, Any] = {}  # global name -> its recorded entry (a second, different one is refused)

    def function(self, data: dict[str, Any]) -> Any:
        """The ``triton.jit`` function ``data`` (a validated ``program_source`` without
        ``skipped``) describes, built once.

        Raises:
            ScriptError: a global does not import here or imports as something else, was
                recorded with another value by another kernel, or the source does not define the
                function.
        """
        qualname = data["qualname"]
        if qualname in self._built:
            return self._built[qualname]
        for name, entry in data["globals"].items():
            if "script" in entry and isinstance(entry["script"], dict):
                self.function(entry["script"])  # defines its own name in the namespace
            self._bind(qualname, name, entry)
        jit_fn = self._build(data)
        self._built[qualname] = jit_fn
        return jit_fn

    def _bind(self, qualname: str, name: str, entry: dict[str, Any]) -> None:
        if "script" in entry:
            return  # the function's own definition binds its name
        earlier = self._origin.get(name)
        if earlier is not None:
            if earlier != entry:
                raise ScriptError(f"global {name!r} was recorded as {earlier} for another kernel and as {entry} for "
                                  f"{qualname!r}: the program changed it while running")
            return
        if "value" in entry:
            value = entry["value"]
            if isinstance(value, dict):
                value = tl.dtype(value["triton_dtype"])
            self.namespace[name] = tl.constexpr(value) if entry.get("constexpr") else value
        else:
            module, _, attr = entry["import"].partition(":")
            try:
                obj = _resolve(module, attr)
            except Exception as e:
                raise ScriptError(f"global {name!r}: module {module!r} does not import here "
                                  f"({type(e).__name__}: {e})") from None
            if obj is None:
                raise ScriptError(f"global {name!r}: module {module!r} has no {attr!r} any more")
            self.namespace[name] = obj
        self._origin[name] = entry

    def _build(self, data: dict[str, Any]) -> Any:
        qualname, line, def_line = data["qualname"], data["line"], data["def_line"]
        name = qualname.rpartition(".")[2]
        # The source at its recorded lines: Triton reads it back with inspect (through linecache,
        # under a private name) and hashes its starting line; a placeholder decorator per recorded
        # decorator line keeps co_firstlineno and the def's line where the program had them.
        text = "\n" * (line - 1) + "@__zerojit_keep__\n" * (def_line - line) + data["source"]
        private = f"<zerojit program_source {data['filename']}:{line} {qualname}>"
        linecache.cache[private] = (len(text), None, text.splitlines(True), private)
        flags = __future__.annotations.compiler_flag if data["future_annotations"] else 0
        self.namespace["__zerojit_keep__"] = _keep
        try:
            code = compile(text, private, "exec", flags=flags, dont_inherit=True)
            exec(code, self.namespace)
        except Exception as e:
            raise ScriptError(f"its recorded source does not build ({type(e).__name__}: {e})") from None
        finally:
            del self.namespace["__zerojit_keep__"]
        fn = self.namespace.get(name)
        if not callable(fn) or getattr(fn, "__name__", None) != name:
            raise ScriptError(f"its recorded source does not define {name!r}")
        fn.__qualname__ = qualname
        options = dict(data["options"])
        jit_fn = triton.jit(fn, **options)
        mark_rebuilt(jit_fn, data)
        self.namespace[name] = jit_fn
        return jit_fn


def imported_modules(jit_fn: Any) -> set[str]:
    """The modules the ``program_source`` ``jit_fn`` was rebuilt from imports its globals from
    (its own and its ``__main__`` callees'); empty for any other function."""
    found: set[str] = set()
    pending = [program_source_of(jit_fn)]
    while pending:
        data = pending.pop()
        if not isinstance(data, dict):
            continue
        for entry in data.get("globals", {}).values():
            if "import" in entry:
                found.add(entry["import"].partition(":")[0])
            pending.append(entry.get("script"))
    return found


def mark_rebuilt(jit_fn: Any, data: dict[str, Any]) -> None:
    """Note on ``jit_fn`` that it compiles what ``program_source`` ``data`` builds (a compile
    worker rebuilds it from there: :func:`program_source_of`): the function :class:`Rebuilder`
    built, or a twin of it with the same source (its generic function, whose compile requests
    carry their own specialization)."""
    jit_fn._zerojit_program_source = data


def program_source_of(jit_fn: Any) -> dict[str, Any] | None:
    """The ``program_source`` a :class:`Rebuilder` built ``jit_fn`` from, or None (any other
    function)."""
    return getattr(jit_fn, "_zerojit_program_source", None)


def _keep(fn: Any) -> Any:
    return fn
