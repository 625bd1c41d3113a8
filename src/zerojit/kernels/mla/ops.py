"""The seven sparse-MLA kernels as PyTorch custom ops: ``torch.ops.zerojit.<kernel name>``.

Importing this module registers them (:func:`zerojit.engine_modes.as_custom_op`); nothing else
does, so a compile worker or a process that never compiles a model with ``torch.compile`` pays
nothing for ``torch.library``. :data:`OPS` maps each KERNELS.md number to its
:class:`~zerojit.engine_modes.ZerojitOp`, which is called with the launcher's keyword inputs and
returns what the launcher returns (docs/engine-modes.md).

Host values: K6 (``compute_swa_indices_and_lens``) reads the largest query length of its
non-causal rows from the tensors when ``max_query_len`` is not given, and K7
(``combine_topk_swa_indices``) reads ``max(gather_lens)`` and ``max(seq_lens // ratio)`` from
CPU tensors when ``max_gather_len`` / ``max_compressed_len`` are not given (its layout checks).
The ops keep the launchers' signatures, hints included (optional, as in eager); inside
``torch.compile`` a launch that would read them raises an error naming the hint to pass (the
runner's step passes all three, computed from the batch on the host). K1, K2, K4 and K5 read no
tensor value; K3 writes into ``expanded_seq_lens`` and ``expanded_block_table`` (declared mutated:
the op returns nothing, :data:`OPS` ``["K3"]`` returns the two buffers as the launcher does).
"""

from __future__ import annotations

from zerojit.engine_modes import ZerojitOp, as_custom_op

from .backends import KERNEL_NAMES
from .combine import combine_topk_swa_indices
from .decode import prepare_uniform_decode
from .index import convert_req_index_to_global_index
from .prefill import build_prefill_chunk_metadata, compute_prefill_metadata
from .slot_mapping import compressed_slot_mapping
from .swa import compute_swa_indices_and_lens

__all__ = ["OPS"]

#: Each kernel's op, by KERNELS.md number (``torch.ops.zerojit.<KERNEL_NAMES[number]>``).
OPS: dict[str, ZerojitOp] = {
    "K1": as_custom_op(convert_req_index_to_global_index,
                       restore=lambda outs, inputs: (outs[0], outs[1] if len(outs) > 1 else None)),
    "K2": as_custom_op(compressed_slot_mapping),
    "K3": as_custom_op(prepare_uniform_decode, mutates_args=("expanded_seq_lens", "expanded_block_table"),
                       restore=lambda outs, inputs: (inputs["expanded_seq_lens"], inputs["expanded_block_table"])),
    "K4": as_custom_op(build_prefill_chunk_metadata),
    "K5": as_custom_op(compute_prefill_metadata),
    "K6": as_custom_op(compute_swa_indices_and_lens, host_values=("max_query_len",)),
    "K7": as_custom_op(combine_topk_swa_indices, host_values=("max_gather_len", "max_compressed_len")),
}

assert all(op.name == KERNEL_NAMES[k] for k, op in OPS.items())  # the registry's names, op for op
