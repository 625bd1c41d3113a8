"""Model configurations for the reference runner: shipped JSON files, or your own.

A configuration is a JSON object whose keys are the fields of
:class:`~zerojit.kernels.mla.config.ModelConfig`; keys that start with ``_`` are comments and
ignored. The fields that describe the model's architecture, for which no value suits every model
(:data:`REQUIRED_FIELDS`: ``block_size``, ``compress_ratios``, ``index_topk``), must be set; every
other field a file leaves out takes its default (:func:`file_defaults`, listed in ``zerojit run
--help`` and docs/cli.md); ``name`` defaults to the file's stem. Shipped configurations live in
``configs/`` beside this module and are named by their file stem:

- ``deepseek-v3.2``: 61 layers, all with the top-2048 indexer (ratio 4), block_size 64,
  Wn 128 (V3.2 proper has no window; the kernels need one), max_model_len 131072, no
  speculative decoding.
- ``dsv4-like``: 61 layers, block_size 256, layers 0-1 window-only then ratio 4 and 128
  alternating, index_topk 1024, index_kpool 4, Wn 128, max_model_len 65536 (ratio-128 TOP_K
  512), one speculative (MTP) token.

Example::

    >>> cfg = load_config("dsv4-like", dcp_size=2)
    >>> cfg.num_layers, cfg.block_size, cfg.dcp_size
    (61, 256, 2)
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Mapping

from zerojit.kernels.mla.config import ConfigError, ModelConfig, mentions

__all__ = ["CONFIG_DIR", "REQUIRED_FIELDS", "ConfigError", "shipped_configs", "file_defaults", "load_config"]

#: Folder of the shipped configuration files (``<name>.json``).
CONFIG_DIR = Path(__file__).resolve().parent / "configs"


#: The fields a configuration file must set, with what each is: the model's architecture, where a
#: default would silently describe another model (block_size 64 is DeepSeek-V3.2's, 256 a
#: DSv4-like model's; their index_topk 2048 and 1024).
REQUIRED_FIELDS: dict[str, str] = {
    "block_size": "tokens per KV-cache block, a power of two: 64 for DeepSeek-V3.2, 256 for a DSv4-like model",
    "compress_ratios": "one compression ratio per layer: 1 = sliding window only, 4 = top-k indexer, 128 = "
                       "compressed without indexer; e.g. [4, 4, 4]",
    "index_topk": "the indexer's top-k width in compressed entries: 2048 for DeepSeek-V3.2, 1024 for a DSv4-like model",
}


def file_defaults() -> dict[str, Any]:
    """The value each field a configuration file may leave out takes (``ModelConfig``'s defaults),
    in field order; ``name`` (the file's stem) and :data:`REQUIRED_FIELDS` are not among them."""
    return {f.name: f.default for f in dataclasses.fields(ModelConfig) if f.name != "name" and f.name not in REQUIRED_FIELDS}


def shipped_configs() -> list[str]:
    """Names of the shipped configurations (file stems in :data:`CONFIG_DIR`), sorted."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def _is_path(name_or_path: str | os.PathLike) -> bool:
    s = os.fspath(name_or_path)
    return isinstance(name_or_path, os.PathLike) or s.endswith(".json") or os.sep in s or "/" in s


def _no_duplicates(pairs: list[tuple[str, Any]], duplicates: list[str]) -> dict[str, Any]:
    """A JSON object as a dict, noting in ``duplicates`` each key given more than once."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out and k not in duplicates:
            duplicates.append(k)
        out[k] = v
    return out


def load_config(name_or_path: str | os.PathLike, *, given_as: Mapping[str, str] | None = None,
                **overrides: Any) -> ModelConfig:
    """Load a model configuration and apply ``overrides``.

    Args:
        name_or_path: a shipped name (see :func:`shipped_configs`) or the path of a JSON file
            (anything ending in ``.json`` or containing a path separator is a path).
        given_as: how the caller was given some overrides (``{"dcp_size": "--dcp-size 0"}``): a
            problem with such a value starts with that instead of ``dcp_size=0``, and the error
            blames the file only when a problem is not one of them.
        **overrides: field values that replace the file's (e.g. ``dcp_size=2, dcp_rank=1,
            num_speculative_tokens=2``). A file without ``name`` is named after its stem.

    Returns:
        The validated :class:`~zerojit.kernels.mla.config.ModelConfig`.

    Raises:
        ConfigError: an unknown name (listing the shipped names), a directory or a file that is
            not ``.json`` (also one named without a path separator: ``--config configs``,
            ``--config trace.csv``), a missing or unreadable file,
            invalid JSON, a non-object top level or a field set twice; otherwise every unknown key, every
            :data:`REQUIRED_FIELDS` field neither the file nor the overrides set (one line each),
            and every invalid field of the file merged with the overrides, all in one error
            (ModelConfig's rules, KERNELS.md "Validity"); a problem judging a default the file
            does not set says so on its line.
    """
    given = os.fspath(name_or_path)  # as the user wrote it ('./x.json', 'configs/'): Path drops './' and '/'
    if _is_path(name_or_path):
        path = Path(name_or_path)
        if path.is_dir():
            raise ConfigError([f"{given!r} is a directory, not a JSON file"], what="config path")
        if path.exists() and not path.is_file():  # a FIFO, device or socket (path.exists follows a link)
            raise ConfigError([f"{given!r} is not a regular file (a FIFO, device or socket)"], what="config path")
        if not path.is_file():
            raise ConfigError([f"{given!r} does not exist"], what="config path")
    else:
        path = CONFIG_DIR / f"{name_or_path}.json"
        if not path.is_file() and Path(name_or_path).is_dir():  # a folder named like a config, e.g. 'configs'
            raise ConfigError([f"{given!r} is a directory, not a JSON file"], what="config path")
        if not path.is_file() and Path(name_or_path).exists():  # a file here, e.g. a trace: no config's name
            raise ConfigError(
                [
                    f"{given!r} is not a JSON config file: a config file's name ends in .json "
                    f"(shipped configs are {', '.join(shipped_configs())})"
                ],
                what="config path",
            )
        if not path.is_file():
            raise ConfigError(
                [
                    f"unknown config {name_or_path!r}: shipped configs are "
                    f"{', '.join(shipped_configs())}; or pass the path of a JSON file"
                ],
                what="config name",
            )
    shown = given if _is_path(name_or_path) else str(path)  # the file, in a problem with its contents
    duplicates: list[str] = []
    try:
        data = json.loads(path.read_text(), object_pairs_hook=lambda pairs: _no_duplicates(pairs, duplicates))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:  # (nested too deep: RecursionError)
        hint = "" if path.suffix == ".json" else " (a config file is JSON, named *.json)"
        raise ConfigError([f"{shown}: cannot read a JSON object: {e}{hint}"], what="config file") from None
    if duplicates:  # json keeps the last silently: which value the user meant is unknowable
        raise ConfigError([f"{shown}: field {k!r} is set more than once" for k in duplicates], what="config file")
    if not isinstance(data, dict):
        raise ConfigError(
            [f"{shown}: the top level must be a JSON object of ModelConfig fields, got {type(data).__name__}"],
            what="config file",
        )
    fields = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("_"))}
    fields.setdefault("name", path.stem)
    fields.update(overrides)
    try:
        return ModelConfig.from_dict(fields, required=REQUIRED_FIELDS)
    except ConfigError as e:  # a problem with a value the file never set says where the value came from
        defaults = {f: v for f, v in file_defaults().items() if f not in fields}
        label = path.name if _is_path(name_or_path) else os.fspath(name_or_path)  # a shipped one: the name given
        problems = [_given_as(_with_defaults(p, defaults, label), overrides, given_as or {}) for p in e.problems]
        given = [g for g in (given_as or {}).values() if any(p.startswith(g) for p in problems)]
        from_caller = all(any(p.startswith(g) for g in given) for p in problems)  # the file is not to blame
        flags = ", ".join(g.split()[0] for g in given)
        what = f"{flags} for config {label}" if from_caller else f"config {label}"
        raise ConfigError(problems, what=what) from None


def _given_as(problem: str, overrides: dict[str, Any], given_as: Mapping[str, str]) -> str:
    """``problem`` starting with how its field's value was given (``--dcp-size 0: ...``) when the
    caller says so, else as it is (``dcp_size=0: ...``)."""
    for f, given in given_as.items():
        prefix = f"{f}={overrides[f]}"
        if problem.startswith(prefix):
            return given + problem[len(prefix):]
    return problem


def _with_defaults(problem: str, defaults: dict[str, Any], file: str) -> str:
    """``problem``, followed by the defaults it judges that ``file`` does not set (one line)."""
    used = [f"{f}={v!r}" for f, v in defaults.items() if mentions(problem, f)]
    if not used:
        return problem
    return f"{problem} ({', '.join(used)}: the default, {file} does not set {'it' if len(used) == 1 else 'them'})"
