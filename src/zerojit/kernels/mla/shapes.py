"""Small integer helpers and the output widths of the sparse-MLA kernels.

Shared by the Triton kernels and their PyTorch references (``reference.py``) so that both
allocate outputs of exactly the same width. Every function here takes and returns plain Python
ints; the rules come from docs KERNELS.md (sections K6 and K7).
"""

from __future__ import annotations

__all__ = ["cdiv", "roundup", "next_power_of_2", "padded_width", "swa_width"]


def cdiv(a: int, b: int) -> int:
    """Ceiling division ``ceil(a / b)`` for ints, ``b > 0`` (KERNELS.md "Conventions")."""
    if b <= 0:
        raise ValueError(f"cdiv: divisor b={b} must be positive")
    return -(-a // b)


def roundup(a: int, multiple: int) -> int:
    """``a`` rounded up to the next multiple of ``multiple`` (``multiple > 0``)."""
    return cdiv(a, multiple) * multiple


def next_power_of_2(n: int) -> int:
    """Smallest power of two ``>= n``, for ``n >= 0``.

    Unlike ``triton.next_power_of_2`` (which returns 0 for 0), this returns 1 for ``n <= 1``:
    it is used to size tiles, and a tile of zero elements is never wanted.
    """
    if n < 0:
        raise ValueError(f"next_power_of_2: n={n} must be >= 0")
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def padded_width(top_k: int, sliding_window: int) -> int:
    """Columns of K7's ``combined`` output: ``roundup(top_k + sliding_window, 128)``.

    ``top_k`` is TOP_K (0 for window-only layers), ``sliding_window`` is the window ``Wn`` in
    tokens. KERNELS.md K7: ``combined[T, roundup(TOP_K + Wn, 128)]``.
    """
    if top_k < 0 or sliding_window < 1:
        raise ValueError(
            f"padded_width: top_k={top_k} must be >= 0 and sliding_window={sliding_window} >= 1"
        )
    return roundup(top_k + sliding_window, 128)


def swa_width(sliding_window: int, causal: bool = True, num_speculative_tokens: int = 0) -> int:
    """Columns ``Wout`` of K6's ``swa_indices`` output.

    Causal: ``Wout = Wn``. Non-causal draft variant: ``Wout = roundup(Wn - 1 + Lmax, 64)`` with
    ``Lmax = 1 + num_speculative_tokens`` (KERNELS.md K6).
    """
    if sliding_window < 1 or num_speculative_tokens < 0:
        raise ValueError(
            f"swa_width: sliding_window={sliding_window} must be >= 1 and "
            f"num_speculative_tokens={num_speculative_tokens} >= 0"
        )
    if causal:
        return sliding_window
    return roundup(sliding_window - 1 + 1 + num_speculative_tokens, 64)
