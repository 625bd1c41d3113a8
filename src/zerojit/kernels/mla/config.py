"""The model configuration that fixes the sparse-MLA kernels' compile-key space.

:class:`ModelConfig` holds the fields of docs KERNELS.md "Model configuration" and checks its
"Validity" rules when it is built, reporting every bad field at once in one
:class:`ConfigError`. Its derived properties (the distinct compression ratios, the top-k width
per layer ratio, the query length of a decode step, ...) are what the kernels'
``get_warmup_keys`` read.

Example::

    >>> cfg = ModelConfig(block_size=256, compress_ratios=[1, 4, 128, 4], index_topk=1024)
    >>> cfg.compressed_ratios, cfg.indexer_ratios, cfg.topk_width(128)
    ((4, 128), (4,), 512)
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .shapes import cdiv

__all__ = ["ConfigError", "ModelConfig", "INDEXER_RATIO", "INT32_MAX", "MAX_NUM_SEQS", "DEFAULT_CUDA_GRAPH_BATCH_SIZES",
           "mentions"]

#: The compression ratio whose layers carry the top-k "lightning indexer" (KERNELS.md: the
#: indexer serves ratio-4 layers; ratio-128 layers have none; ratio-1 layers are window-only).
INDEXER_RATIO = 4

#: Largest value an int32 slot, position or count may take (KERNELS.md "Conventions": a
#: configuration whose values cannot fit int32 is rejected when it is built).
INT32_MAX = 2**31 - 1

#: Largest ``max_num_seqs``: K5 ``compute_prefill_metadata`` handles a step's prefills in one
#: Triton tile of ``next_power_of_2(max_num_seqs)`` lanes, and Triton's largest tensor is 2**20
#: elements (``triton.language.TRITON_MAX_TENSOR_NUMEL``).
MAX_NUM_SEQS = 2**20

#: The decode batch sizes captured as CUDA graphs when a config gives none (those up to its
#: ``max_num_seqs``).
DEFAULT_CUDA_GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32)


class ConfigError(ValueError):
    """An invalid :class:`ModelConfig`; lists every problem at once (one problem: one line).

    Attributes:
        problems: one line per problem, each naming the field, its value and what to change.
    """

    def __init__(self, problems: list[str] | str, *, what: str = "ModelConfig") -> None:
        if isinstance(problems, str):  # re-created from its message (e.g. when unpickled)
            super().__init__(problems)
            self.problems = [problems]
            return
        self.problems = list(problems)
        n = len(self.problems)
        if n == 1:  # one line
            super().__init__(f"invalid {what}: {self.problems[0]}")
            return
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid {what} ({n} problems):\n{lines}")


def _as_json(v: Any) -> str:
    """``v`` as JSON writes it (``[1, 2]``, ``true``, ``null``), so a message echoes the config
    file; ``repr`` for what JSON cannot write (a value given from Python)."""
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return repr(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_pow2(v: int) -> bool:
    return v >= 1 and (v & (v - 1)) == 0


def _pow2_neighbours(v: int) -> str:
    lo = 1 << max(v.bit_length() - 1, 0)
    return f"{lo} or {lo * 2}" if v > 1 else "1, 2 or 4"


def _join_wheres(wheres: list[str]) -> str:
    """``compress_ratios[0]``, ``compress_ratios[0, 3]`` or ``index_kpool`` / mixed."""
    layers = [w[len("compress_ratios[") : -1] for w in wheres if w.startswith("compress_ratios[")]
    parts = [f"compress_ratios[{', '.join(layers)}]"] if layers else []
    parts += [w for w in wheres if not w.startswith("compress_ratios[")]
    return " and ".join(parts)


def mentions(problem: str, field_name: str) -> bool:
    """Whether a :class:`ConfigError` problem line names field ``field_name`` (as a word)."""
    return re.search(rf"(?<![\w.]){re.escape(field_name)}(?!\w)", problem) is not None


def _divisors_of(n: int) -> str:
    """The powers of two in ``[2, n]`` that divide ``n``, as ``"2, 4, 8"`` ("" when none)."""
    return ", ".join(str(d) for d in range(2, n + 1) if n % d == 0 and _is_pow2(d))


@dataclass(frozen=True)
class ModelConfig:
    """Configuration of a DeepSeek-style sparse-MLA model, as far as its kernels care.

    Every field is an int unless said; "tokens" are KV-cache token positions. The rules checked
    when the config is built come from KERNELS.md "Model configuration" / "Validity" (block_size
    a power of two; every ratio > 1 divides block_size; r < S; ``(block_size // ratio) % I == 0``
    for every ratio > 1; ``block_size % I == 0`` when S > 1), plus the obvious ranges (positive
    limits, a non-empty ``compress_ratios``) and the int32 limit of the Conventions, plus the
    limits between fields that the runner and the kernels' compile keys need:

    - ``max_model_len >= 2``: a request holds at least one prompt token and the token its
      prefill samples (the trace loader and the scheduler need room for both);
    - ``1 + num_speculative_tokens <= max_num_batched_tokens`` (a step holds a whole decode
      query; the budget never cuts one) and ``<= max_model_len`` (no sequence is longer). This
      also bounds K6's non-causal width ``roundup(Wn - 1 + Lq, 64)``, a constexpr;
    - ``sliding_window <= max_model_len``: a longer window covers nothing more, and Wn is a
      constexpr width of K6 and K7 (K6 unrolls its columns);
    - ``max_num_seqs <= max_num_batched_tokens``: every request in a step brings at least one
      query token. ``max_num_seqs`` sets K5's tile (``next_power_of_2(max_num_seqs)``, at most
      :data:`MAX_NUM_SEQS`) and the decode buffers' rows.

    Fields:
        name: a label for reports ("custom" unless given).
        block_size: tokens per KV-cache block; a power of two (64 for a DeepSeek-V3.2-like model,
            256 for a DSv4-like one).
        compress_ratios: one compression ratio per layer: 1 = sliding-window only, 4 =
            compressed with a top-k indexer, 128 = compressed without an indexer. Any ratio
            ``>= 1`` that satisfies the rules is accepted; a list is stored as a tuple.
        index_topk: TOP_K of the indexer (the top-k width of ratio-4 layers), in compressed
            entries.
        index_kpool: optional pooled-selector ratio, an extra compression ratio (None = none);
            when set it must be > 1 and obeys the rules of every ratio > 1.
        sliding_window: the window ``Wn`` in tokens, ``<= max_model_len``.
        max_model_len: longest sequence (prompt plus output), in tokens; ``>= 2``.
        max_num_batched_tokens: most tokens in one scheduler step.
        max_num_seqs: most requests in one scheduler step, ``<= max_num_batched_tokens``.
        dcp_size: decode-context-parallel world size S (1 = no DCP).
        dcp_rank: this process's DCP rank r, ``0 <= r < S``.
        dcp_interleave: DCP interleave I: runs of I consecutive (compressed) entries belong to
            one rank.
        num_speculative_tokens: draft tokens per decode step (0 = no speculative decoding);
            a decode query of ``1 + num_speculative_tokens`` tokens must fit in
            ``max_num_batched_tokens`` and in ``max_model_len``.
        cuda_graph_batch_sizes: the decode batch sizes (requests) the runner's ``--cuda-graphs``
            captures one CUDA graph for, as engines do (vLLM's ``cudagraph_capture_sizes``):
            positive ints, strictly increasing (sorted, unique), at least one; a list is stored
            as a tuple. A decode step of B requests replays the graph of the smallest size >= B
            (padded); larger steps run eagerly. A graph is captured at its size's first step, so
            a size above ``max_num_seqs`` (no decode step holds more requests) costs nothing:
            it is never reached. Default: :data:`DEFAULT_CUDA_GRAPH_BATCH_SIZES`.

    Raises:
        ConfigError: listing every invalid field at once.
    """

    name: str = "custom"
    block_size: int = 64
    compress_ratios: tuple[int, ...] = (4,)
    index_topk: int = 2048
    index_kpool: int | None = None
    sliding_window: int = 128
    max_model_len: int = 65536
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    dcp_size: int = 1
    dcp_rank: int = 0
    dcp_interleave: int = 1
    num_speculative_tokens: int = 0
    cuda_graph_batch_sizes: tuple[int, ...] = DEFAULT_CUDA_GRAPH_BATCH_SIZES

    def __post_init__(self) -> None:
        for f in ("compress_ratios", "cuda_graph_batch_sizes"):
            if isinstance(getattr(self, f), list):
                object.__setattr__(self, f, tuple(getattr(self, f)))
        problems = self._problems()
        if problems:
            # Report in field declaration order, so the message reads like the config.
            order = {f: i for i, f in enumerate(self.field_names())}
            problems.sort(key=lambda m: order.get(re.split(r"[=\[]", m, 1)[0], len(order)))
            raise ConfigError(problems)

    # ------------------------------------------------------------------ validation
    def _problems(self) -> list[str]:
        """Every rule this config breaks, one message each (empty when valid)."""
        p: list[str] = []
        if not isinstance(self.name, str):
            p.append(f"name={self.name!r}: must be a str")

        int_fields = {
            # field: (minimum, hint)
            "block_size": (1, "tokens per KV-cache block, e.g. 64"),
            "index_topk": (1, "the indexer's top-k width, e.g. 2048"),
            "sliding_window": (1, "the window in tokens, e.g. 128"),
            "max_model_len": (2, "a request holds at least 1 prompt token and the 1 token its "
                                 "prefill samples; e.g. 65536"),
            "max_num_batched_tokens": (1, "e.g. 8192"),
            "max_num_seqs": (1, "e.g. 256"),
            "dcp_size": (1, "use 1 to turn DCP off"),
            "dcp_rank": (0, "ranks count from 0"),
            "dcp_interleave": (1, "use 1 for no interleave"),
            "num_speculative_tokens": (0, "use 0 to turn speculative decoding off"),
        }
        ok: dict[str, bool] = {}
        for fname, (lo, hint) in int_fields.items():
            v = getattr(self, fname)
            if not _is_int(v):
                p.append(f"{fname}={v!r}: must be an int ({hint})")
                ok[fname] = False
            elif v < lo:
                p.append(f"{fname}={v}: must be >= {lo} ({hint})")
                ok[fname] = False
            elif v > INT32_MAX:
                p.append(f"{fname}={v}: must fit int32 (<= {INT32_MAX})")
                ok[fname] = False
            else:
                ok[fname] = True

        # Limits between fields, each checked once the fields it reads are valid ints.
        mml = self.max_model_len if ok["max_model_len"] else None
        mnbt = self.max_num_batched_tokens if ok["max_num_batched_tokens"] else None
        if ok["sliding_window"] and mml is not None and self.sliding_window > mml:
            p.append(
                f"sliding_window={self.sliding_window}: must be <= max_model_len={mml} (a window "
                "longer than the longest sequence covers nothing more, and it sets the kernels' "
                f"constexpr window width); use sliding_window <= {mml}"
            )
        if ok["max_num_seqs"] and mnbt is not None:
            seqs = self.max_num_seqs
            if seqs > mnbt:
                p.append(
                    f"max_num_seqs={seqs}: must be <= max_num_batched_tokens={mnbt} (every request "
                    "in a step brings at least one token, so a step never holds more requests); "
                    "lower max_num_seqs or raise max_num_batched_tokens"
                )
            elif seqs > MAX_NUM_SEQS:
                p.append(
                    f"max_num_seqs={seqs}: must be <= {MAX_NUM_SEQS} (K5 handles a step's prefills "
                    "in one Triton tile of next_power_of_2(max_num_seqs) lanes, at most 2**20); "
                    f"use max_num_seqs <= {MAX_NUM_SEQS}"
                )
        if ok["num_speculative_tokens"]:
            spec = self.num_speculative_tokens
            limits = (  # (field, its value or None when invalid, why a decode query must fit it)
                ("max_num_batched_tokens", mnbt, "a step holds a whole decode query"),
                ("max_model_len", mml, "no sequence is longer"),
            )
            short = [(f, v, why) for f, v, why in limits if v is not None and 1 + spec > v]
            if short:
                fits = " and in ".join(f"{f}={v} ({why})" for f, v, why in short)
                p.append(
                    f"num_speculative_tokens={spec}: a decode query of 1 + num_speculative_tokens = "
                    f"{1 + spec} tokens must fit in {fits}; use num_speculative_tokens <= "
                    f"{min(v for _, v, _ in short) - 1} or raise {' and '.join(f for f, _, _ in short)}"
                )

        sizes = self.cuda_graph_batch_sizes
        given = _as_json(list(sizes) if isinstance(sizes, tuple) else sizes)  # as the config file wrote it
        if not isinstance(sizes, tuple) or not sizes:
            p.append(f"cuda_graph_batch_sizes={given}: must be a non-empty list of positive ints, e.g. [1, 2, 4, 8]")
        elif not all(_is_int(b) and 1 <= b <= INT32_MAX for b in sizes):
            bad = next(b for b in sizes if not (_is_int(b) and 1 <= b <= INT32_MAX))
            p.append(f"cuda_graph_batch_sizes={given}: {_as_json(bad)} is not a positive int (requests per "
                     "captured decode step)")
        elif any(a >= b for a, b in zip(sizes, sizes[1:])):
            p.append(f"cuda_graph_batch_sizes={given}: must be sorted and unique; use "
                     f"{sorted(set(sizes))!r}")

        bs = self.block_size if ok["block_size"] else None
        if bs is not None and not _is_pow2(bs):
            p.append(f"block_size={bs}: must be a power of two (e.g. {_pow2_neighbours(bs)})")

        # Ratios: every layer's, then index_kpool.
        ratios: list[tuple[str, int]] = []
        cr = self.compress_ratios
        if not isinstance(cr, tuple):
            p.append(f"compress_ratios={cr!r}: must be a tuple or list of ints, one per layer")
        elif len(cr) == 0:
            p.append("compress_ratios=(): must list one ratio per layer (at least one layer)")
        else:
            for i, c in enumerate(cr):
                if not _is_int(c):
                    p.append(f"compress_ratios[{i}]={c!r}: must be an int (1, 4 or 128)")
                elif c < 1:
                    p.append(
                        f"compress_ratios[{i}]={c}: must be >= 1 (1 = sliding-window only, "
                        "4 or 128 = compressed)"
                    )
                else:
                    ratios.append((f"compress_ratios[{i}]", c))
        kp = self.index_kpool
        if kp is not None:
            if not _is_int(kp):
                p.append(f"index_kpool={kp!r}: must be an int > 1 or None")
            elif kp <= 1:
                p.append(f"index_kpool={kp}: must be > 1 (it is a compression ratio) or None")
            else:
                ratios.append(("index_kpool", kp))

        S = self.dcp_size if ok["dcp_size"] else None
        r = self.dcp_rank if ok["dcp_rank"] else None
        I = self.dcp_interleave if ok["dcp_interleave"] else None
        if S is not None and r is not None and r >= S:
            p.append(
                f"dcp_rank={r}: must be < dcp_size={S} (ranks 0..{S - 1}); "
                "change dcp_rank or dcp_size"
            )

        if bs is not None:
            # Group by ratio value so a 61-layer model with one bad ratio gives one message.
            by_ratio: dict[int, list[str]] = {}
            for where, c in ratios:
                if c > 1:
                    by_ratio.setdefault(c, []).append(where)
            for c, wheres in by_ratio.items():
                where = _join_wheres(wheres)
                if bs % c != 0:
                    divisors = _divisors_of(bs)
                    use = (f"; use a ratio in {{{divisors}}} or" if divisors
                           else ", which has no divisor > 1; use")
                    p.append(
                        f"{where}={c}: every ratio > 1 must divide block_size={bs}{use} "
                        f"a block_size that is a multiple of {c}"
                    )
                elif I is not None and (bs // c) % I != 0:
                    p.append(
                        f"dcp_interleave={I}: must divide block_size // ratio = {bs}//{c} = "
                        f"{bs // c} (ratio {c} of {where}); use a smaller dcp_interleave"
                    )
            if S is not None and S > 1 and I is not None and bs % I != 0:
                p.append(
                    f"dcp_interleave={I}: must divide block_size={bs} when dcp_size={S} > 1; "
                    "use a smaller dcp_interleave"
                )
        return p

    # ------------------------------------------------------------------ derived values
    @property
    def num_layers(self) -> int:
        """Number of attention layers: ``len(compress_ratios)``."""
        return len(self.compress_ratios)

    @property
    def compressed_ratios(self) -> tuple[int, ...]:
        """Sorted distinct ratios > 1 of ``compress_ratios`` plus ``index_kpool`` when set.

        The ratios of the compressed KV caches (KERNELS.md K2 warm-up space); empty when every
        layer is window-only and there is no pooled selector.
        """
        rs = {c for c in self.compress_ratios if c > 1}
        if self.index_kpool is not None:
            rs.add(self.index_kpool)
        return tuple(sorted(rs))

    @property
    def indexer_ratios(self) -> tuple[int, ...]:
        """Sorted distinct ratios of layers that have a top-k indexer.

        A layer has an indexer iff its ratio is :data:`INDEXER_RATIO` (4): KERNELS.md gives the
        indexer to ratio-4 layers, none to ratio-128 layers, and ratio-1 layers are window-only.
        Other ratios (accepted by the validity rules) are treated like 128: no indexer.
        So this is ``(4,)`` or ``()`` (KERNELS.md K4 warm-up space).
        """
        return (INDEXER_RATIO,) if INDEXER_RATIO in self.compress_ratios else ()

    @property
    def query_len(self) -> int:
        """Query tokens per request in a decode step: ``Lq = 1 + num_speculative_tokens``."""
        return 1 + self.num_speculative_tokens

    @property
    def max_blocks_per_req(self) -> int:
        """Block-table width a request can need: ``cdiv(max_model_len, block_size)``."""
        return cdiv(self.max_model_len, self.block_size)

    def topk_width(self, ratio: int) -> int:
        """TOP_K of K7 for a layer of this compression ratio, in compressed entries.

        - ratio 1 (window only): 0 (no top-k part).
        - ratio 4 (indexer layer): ``index_topk``.
        - any other ratio c > 1 (no indexer; 128 in practice): ``cdiv(max_model_len, c)``,
          i.e. every compressed entry of the longest sequence (KERNELS.md K7 gives
          ``cdiv(max_model_len, 128)`` for ratio 128; the same rule is used for other
          indexer-less ratios).

        ``ratio`` need not appear in ``compress_ratios``; it must be ``>= 1``.
        """
        if not _is_int(ratio) or ratio < 1:
            raise ValueError(f"topk_width: ratio={ratio!r} must be an int >= 1")
        if ratio == 1:
            return 0
        if ratio == INDEXER_RATIO:
            return self.index_topk
        return cdiv(self.max_model_len, ratio)

    @property
    def layer_topk_pairs(self) -> tuple[tuple[int, int], ...]:
        """Sorted distinct ``(ratio, topk_width(ratio))`` over the layers (K7 warm-up space)."""
        return tuple(sorted({(c, self.topk_width(c)) for c in self.compress_ratios}))

    # ------------------------------------------------------------------ conversions
    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Names of the config's fields, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, required: Mapping[str, str] | None = None) -> ModelConfig:
        """Build from a mapping of field names to values; missing fields take their defaults,
        except the ``required`` ones.

        Args:
            d: field name -> value.
            required: fields ``d`` must set, each with what it is (for the message), e.g.
                ``{"block_size": "tokens per KV-cache block, e.g. 256"}``.

        Raises:
            ConfigError: naming every unknown key, every missing required field (one line each:
                ``"block_size: missing; ..."``), and every invalid field. A problem that mentions a
                missing required field is left out: it would judge the default standing in for
                the value the caller has yet to give.
        """
        if not isinstance(d, Mapping):
            raise ConfigError(
                [f"from_dict: expected a mapping of field names, got {type(d).__name__}"]
            )
        names = set(cls.field_names())
        unknown = sorted((k for k in d if k not in names), key=str)
        problems = [
            f"{k!r}: unknown field; known fields are {', '.join(cls.field_names())}"
            for k in unknown
        ]
        missing = [f for f in cls.field_names() if f in (required or {}) and f not in d]
        problems += [f"{f}: missing; set it ({required[f]})" for f in missing]
        known = {k: v for k, v in d.items() if k in names}
        try:
            cfg = cls(**known)
        except ConfigError as e:
            raise ConfigError(problems + [p for p in e.problems if not any(mentions(p, f) for f in missing)]) from None
        if problems:
            raise ConfigError(problems)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready dict of every field (``compress_ratios`` and ``cuda_graph_batch_sizes``
        as lists).

        ``ModelConfig.from_dict(cfg.to_dict()) == cfg``.
        """
        d = {f: getattr(self, f) for f in self.field_names()}
        d["compress_ratios"] = list(self.compress_ratios)
        d["cuda_graph_batch_sizes"] = list(self.cuda_graph_batch_sizes)
        return d

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with ``changes`` applied, validated again (like ``dataclasses.replace``).

        Raises:
            ConfigError: for unknown field names and every invalid field of the result.
        """
        return type(self).from_dict({**self.to_dict(), **changes})
