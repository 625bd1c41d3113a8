"""Model configurations for the reference runner: shipped JSON files, or your own.

A configuration is a JSON object whose keys are the fields of
:class:`~zerojit.kernels.mla.config.ModelConfig` (missing fields take their defaults); keys that
start with ``_`` are comments and ignored. Shipped configurations live in ``configs/`` beside
this module and are named by their file stem:

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
import re
from pathlib import Path
from typing import Any

from zerojit.kernels.mla.config import ConfigError, ModelConfig

__all__ = ["CONFIG_DIR", "ConfigError", "shipped_configs", "load_config"]

#: Folder of the shipped configuration files (``<name>.json``).
CONFIG_DIR = Path(__file__).resolve().parent / "configs"


def shipped_configs() -> list[str]:
    """Names of the shipped configurations (file stems in :data:`CONFIG_DIR`), sorted."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def _is_path(name_or_path: str | os.PathLike) -> bool:
    s = os.fspath(name_or_path)
    return isinstance(name_or_path, os.PathLike) or s.endswith(".json") or os.sep in s or "/" in s


def load_config(name_or_path: str | os.PathLike, **overrides: Any) -> ModelConfig:
    """Load a model configuration and apply ``overrides``.

    Args:
        name_or_path: a shipped name (see :func:`shipped_configs`) or the path of a JSON file
            (anything ending in ``.json`` or containing a path separator is a path).
        **overrides: field values that replace the file's (e.g. ``dcp_size=2, dcp_rank=1,
            num_speculative_tokens=2``). A file without ``name`` is named after its stem.

    Returns:
        The validated :class:`~zerojit.kernels.mla.config.ModelConfig`.

    Raises:
        ConfigError: an unknown name (listing the shipped names), a missing or unreadable file,
            invalid JSON or a non-object top level; otherwise every unknown key and every invalid
            field of the file merged with the overrides, all in one error (ModelConfig's rules,
            KERNELS.md "Validity").
    """
    if _is_path(name_or_path):
        path = Path(name_or_path)
        if path.is_dir():
            raise ConfigError([f"config path {str(path)!r} is a directory, not a JSON file"], what="config path")
        if not path.is_file():
            raise ConfigError([f"config file {str(path)!r} does not exist"], what="config path")
    else:
        path = CONFIG_DIR / f"{name_or_path}.json"
        if not path.is_file():
            raise ConfigError(
                [
                    f"unknown config {name_or_path!r}: shipped configs are "
                    f"{', '.join(shipped_configs())}; or pass the path of a JSON file"
                ],
                what="config name",
            )
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError([f"{path}: cannot read a JSON object: {e}"], what="config file") from None
    if not isinstance(data, dict):
        raise ConfigError(
            [f"{path}: the top level must be a JSON object of ModelConfig fields, got {type(data).__name__}"],
            what="config file",
        )
    fields = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("_"))}
    fields.setdefault("name", path.stem)
    fields.update(overrides)
    try:
        return ModelConfig.from_dict(fields)
    except ConfigError as e:  # say which values in the messages the file never set
        unset = [f"{f.name}={getattr(ModelConfig, f.name)!r}" for f in dataclasses.fields(ModelConfig)
                 if f.name not in fields and f.default is not dataclasses.MISSING
                 and any(re.search(rf"(?<!\w){f.name}=", problem) for problem in e.problems)]
        if not unset:
            raise
        note = f"{path.name} does not set {', '.join(unset)}: {'that is' if len(unset) == 1 else 'those are'} ModelConfig's default"
        raise ConfigError(e.problems + [note]) from None
