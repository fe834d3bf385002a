"""attnkit.torch: attnkit's attention inside torch's autograd.

``attnkit.scaled_dot_product_attention`` comes here by itself when a torch input requires grad and
grad mode is on; this module is what it uses, and imports torch. The forward kernel keeps the
output and the log-sum-exp of each row; ``backward()`` hands them to attnkit's backward kernel
(FlashAttention-2's algorithm: the weights are recomputed block by block, never stored), which
returns the gradients of query, key and value, then sums them over the dimensions the call
broadcast.

Gradients that the kernel does not produce are computed here from the attention weights
[B, Hq, L, S], with torch operations: those of the log-sum-exp (``return_lse=True``), of the weights
themselves (``attnkit.nn.MultiheadAttention`` with ``need_weights=True``), and of a floating
``attn_mask`` that requires grad (a learned bias). They cost the memory of the weights, only when
they are asked for. The mask's gradient needs the dropout pattern, which stays inside the kernel:
a mask that requires grad with ``dropout_p > 0`` is refused. ``scale``, ``softcap`` and
``alibi_slopes`` are constants: slopes that require grad are refused rather than silently detached.
"""

from __future__ import annotations

from ._autograd import Attention, VarlenAttention, attention, dropout_seed, varlen_attention_function
from .functional import scaled_dot_product_attention

__all__ = ["scaled_dot_product_attention", "Attention", "attention", "VarlenAttention", "varlen_attention_function"]
