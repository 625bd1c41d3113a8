"""Input checks shared by the MLA kernel launchers (K1-K7), from metadata only.

A launcher validates its inputs on every launch, before anything reaches Triton, so each check
reads only what costs no device sync (a tensor's type, dtype, shape, strides and device; a Python
int's value), never a tensor's values, and valid inputs take a fast path.

Every check raises :class:`zerojit.kernel.KernelInputError` ``(kernel, argument, problem)``, whose
message reads ``"<kernel>: argument '<argument>': <problem>"``; the problem says what the input
must be and what it was, e.g. ``"must be torch.int32, got torch.int64"``.
"""

from __future__ import annotations

import torch

from zerojit.kernel import KernelInputError

__all__ = ["INT32_MAX", "check_dcp", "check_int", "check_row_stride", "check_tensor", "is_int"]

#: The largest value of an int32 kernel argument (a larger one would compile an int64 variant).
INT32_MAX = 2**31 - 1


def is_int(v) -> bool:
    """``v`` is a Python int and not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def check_tensor(
    kernel: str,
    arg: str,
    t,
    *,
    ndim: int,
    dtype: torch.dtype = torch.int32,
    device: torch.device | None = None,
    device_of: str = "the other inputs",
    length: int | None = None,
    length_of: str | None = None,
) -> None:
    """``t`` is a ``torch.Tensor`` of ``dtype`` and ``ndim`` dimensions whose last dimension is
    contiguous (stride 1, or of size <= 1); strides of the other dimensions are free.

    Args:
        kernel, arg: the kernel's and the argument's names, for the message.
        t: the input.
        ndim: its number of dimensions.
        dtype: its dtype (int32 unless given).
        device: the device it must be on (None: any), the one of the input named ``device_of``.
        length: the size its first dimension must have (None: any), described in the message
            by ``length_of`` (e.g. ``"T (rows of token_indices)"``).

    Raises:
        KernelInputError: not a tensor; another dtype, ndim, device or length; a last dimension
            with a stride other than 1.
    """
    if (isinstance(t, torch.Tensor) and t.dtype == dtype and t.dim() == ndim  # the fast path: all good
            and (device is None or t.device == device) and (t.stride(-1) == 1 or t.shape[-1] <= 1)
            and (length is None or t.shape[0] == length)):
        return
    if not isinstance(t, torch.Tensor):
        raise KernelInputError(kernel, arg, f"must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise KernelInputError(kernel, arg, f"must be {dtype}, got {t.dtype}")
    if t.dim() != ndim:
        raise KernelInputError(kernel, arg, f"must be {ndim}-D, got shape {tuple(t.shape)}")
    if device is not None and t.device != device:
        raise KernelInputError(kernel, arg, f"is on {t.device}, {device_of} on {device}")
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        what = "must be contiguous" if ndim == 1 else "its last dimension must be contiguous (stride 1)"
        raise KernelInputError(kernel, arg, f"{what}, got strides {t.stride()}")
    if length is not None and t.shape[0] != length:
        expected = f"{length_of} = {length}" if length_of else f"{length}"
        raise KernelInputError(kernel, arg, f"must have {expected} entries, got {t.shape[0]}")


def check_int(kernel: str, arg: str, v, *, low: int = 0, high: int | None = None) -> None:
    """``v`` is a Python int (not a bool) in ``[low, high]``, or ``>= low`` when ``high`` is None.

    Raises:
        KernelInputError: ``"must be an int >= low, got v"`` or ``"must be an int in [low, high],
            got v"`` (the range written ``[low, 2**31)`` for ``high=INT32_MAX``).
    """
    if (type(v) is int or is_int(v)) and v >= low and (high is None or v <= high):  # the fast path
        return
    if high is None:
        bound = f">= {low}"
    elif high == INT32_MAX:
        bound = f"in [{low}, 2**31)"
    else:
        bound = f"in [{low}, {high}]"
    raise KernelInputError(kernel, arg, f"must be an int {bound}, got {v!r}")


def check_dcp(kernel: str, dcp_size, dcp_rank, dcp_interleave) -> None:
    """A decode-context-parallel triple: S = ``dcp_size`` and I = ``dcp_interleave`` ints in
    ``[1, 2**31)``, the rank r = ``dcp_rank`` an int in ``[0, S)``.

    Raises:
        KernelInputError: naming the first of ``dcp_size``, ``dcp_interleave``, ``dcp_rank``
            that is wrong.
    """
    check_int(kernel, "dcp_size", dcp_size, low=1, high=INT32_MAX)
    check_int(kernel, "dcp_interleave", dcp_interleave, low=1, high=INT32_MAX)
    if not (is_int(dcp_rank) and 0 <= dcp_rank < dcp_size):
        raise KernelInputError(kernel, "dcp_rank", f"must be an int in [0, dcp_size={dcp_size}), got {dcp_rank!r}")


def check_row_stride(kernel: str, arg: str, t: torch.Tensor) -> int:
    """``t.stride(0)``, checked to fit the int32 the kernels take it as.

    Raises:
        KernelInputError: a row stride above :data:`INT32_MAX`.
    """
    stride = t.stride(0)
    if stride > INT32_MAX:
        raise KernelInputError(kernel, arg, f"row stride {stride} does not fit int32")
    return stride
