"""attnkit.nn: torch modules whose attention runs on attnkit's kernels.

``MultiheadAttention`` is a subclass of ``torch.nn.MultiheadAttention`` with the same constructor,
parameters, state dict and forward signature: a model swaps it in (or converts a trained module
with ``MultiheadAttention.from_torch``) and keeps its weights. The projections stay torch's own
(``torch.nn.functional.linear``, so their gradients are torch's); the attention between them is one
call of attnkit's fused kernel, forward and backward, with the masks merged into one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import functional
from . import torch as attnkit_torch
from .kv_cache import KVCache, attend

__all__ = ["MultiheadAttention"]


class MultiheadAttention(torch.nn.MultiheadAttention):
    """``torch.nn.MultiheadAttention`` with attnkit's attention kernel.

    Same arguments as torch's: ``embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
    add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None, dtype=None``, the
    same parameters under the same names (``in_proj_weight`` or ``q/k/v_proj_weight``,
    ``in_proj_bias``, ``bias_k``, ``bias_v``, ``out_proj``), initialised the same way; and
    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False)`` returning ``(attn_output, attn_weights)``.

    Differences from torch, on purpose:
        * A query that no key may attend to (every key masked) gives zeros, not NaN.
        * ``is_causal=True`` without ``attn_mask`` is causal attention (torch refuses it). With an
          ``attn_mask`` it is a hint, as in torch: the mask must be the causal mask, and the kernel
          applies causality itself (unless the mask requires grad or keys were appended by
          ``add_bias_kv``/``add_zero_attn``; then the mask is applied as given).
        * The returned weights are the softmax before dropout (torch returns them after dropout),
          and dropout's random stream is attnkit's (seeded from torch's generator, so
          ``torch.manual_seed`` makes it repeatable), not torch's.
        * Inputs must be on the CPU, in float32, float64, bfloat16 or float16.

    ``need_weights=True`` (torch's default) writes the [N, H, L, S] weights; pass
    ``need_weights=False`` when they are not used, as with torch's fast path.
    """

    @classmethod
    def from_torch(cls, module: torch.nn.MultiheadAttention) -> "MultiheadAttention":
        """A copy of a torch.nn.MultiheadAttention (its configuration and weights) on attnkit."""
        if not isinstance(module, torch.nn.MultiheadAttention):
            raise TypeError(f"module: expected a torch.nn.MultiheadAttention, got {type(module).__name__}")
        weight = module.in_proj_weight if module.in_proj_weight is not None else module.q_proj_weight
        copy = cls(
            module.embed_dim, module.num_heads, dropout=module.dropout,
            bias=module.in_proj_bias is not None, add_bias_kv=module.bias_k is not None,
            add_zero_attn=module.add_zero_attn, kdim=module.kdim, vdim=module.vdim,
            batch_first=module.batch_first, device=weight.device, dtype=weight.dtype,
        )  # fmt: skip
        copy.load_state_dict(module.state_dict())
        copy.train(module.training)
        return copy

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):  # fmt: skip
        """``torch.nn.MultiheadAttention.forward``'s arguments and results, with one attnkit call for
        the attention: returns ``(output, weights)``, weights None when ``need_weights=False``.

        ``is_causal=True`` without ``attn_mask`` is causal attention (torch requires the mask); the
        weights are the softmax before dropout. Bool masks stay bool; the key-padding and attention
        masks are merged into one."""
        for name, x in (("query", query), ("key", key), ("value", value)):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
        batched = query.dim() == 3
        if query.dim() not in (2, 3) or key.dim() != query.dim() or value.dim() != query.dim():
            raise ValueError(
                "query, key, value: expected 3-D [N, L, E] (batch_first) or [L, N, E] tensors, or 2-D unbatched "
                f"[L, E], all of one rank; got query {list(query.shape)}, key {list(key.shape)}, "
                f"value {list(value.shape)}"
            )
        if not batched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        out, weights = self._attend(query, key, value, key_padding_mask, need_weights, attn_mask,
                                    average_attn_weights, is_causal)  # fmt: skip
        if not batched:
            return out.squeeze(0), None if weights is None else weights.squeeze(0)
        if not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def _attend(self, query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights,
                is_causal):  # fmt: skip
        """Batch-first [N, L, E] inputs → ([N, L, E] output, weights or None)."""
        N, L, E = query.shape
        S = key.shape[1]
        H, d = self.num_heads, self.head_dim
        shapes = f"(query {list(query.shape)}, key {list(key.shape)}, value {list(value.shape)}, batch first)"
        if E != self.embed_dim:
            raise ValueError(f"query: embedding size {E} is not the module's embed_dim {self.embed_dim} {shapes}")
        if key.shape[-1] != self.kdim or value.shape[-1] != self.vdim:
            raise ValueError(f"key, value: widths must be kdim = {self.kdim} and vdim = {self.vdim} {shapes}")
        if key.shape[:2] != (N, S) or value.shape[:2] != (N, S):
            raise ValueError(f"key, value: expected batch {N} and one length for both {shapes}")

        q, k, v = self._project(query, key, value)
        extra = 0  # keys appended after the S given ones: bias_k/bias_v, then a zero key
        if self.bias_k is not None:
            k = torch.cat([k, self.bias_k.expand(N, 1, -1)], dim=1)
            v = torch.cat([v, self.bias_v.expand(N, 1, -1)], dim=1)
            extra += 1
        if self.add_zero_attn:
            k = torch.cat([k, k.new_zeros(N, 1, k.shape[-1])], dim=1)
            v = torch.cat([v, v.new_zeros(N, 1, v.shape[-1])], dim=1)
            extra += 1

        mask, causal = self._mask(key_padding_mask, attn_mask, is_causal, N, L, S, extra, query.dtype)
        # [N, S, H·d] → [N, H, S, d], views: attnkit reads any strides.
        q4, k4, v4 = (x.unflatten(-1, (H, d)).transpose(1, 2) for x in (q, k, v))
        dropout_p = self.dropout if self.training else 0.0
        seed = attnkit_torch.dropout_seed(dropout_p)
        call = functional._prepare(
            q4, k4, v4, mask, dropout_p, causal, None, False, "top_left", None, None, None, None, seed
        )
        attn, _, weights = functional._run(call, q4, k4, v4, mask, probs=need_weights)

        out = F.linear(attn.transpose(1, 2).flatten(2), self.out_proj.weight, self.out_proj.bias)
        if weights is not None:
            weights = weights.to(query.dtype)
            if average_attn_weights:
                weights = weights.mean(dim=1)
        return out, weights

    # ---- decoding over a KV cache ----

    def make_cache(self, max_sequence_length, *, max_sequences=1, dtype="float32", **options):
        """An ``attnkit.KVCache`` shaped for this module's ``forward_cached``: ``num_heads`` KV
        heads of ``head_dim`` features. ``dtype`` is its storage: ``"float32"``, ``"float16"``,
        ``"bfloat16"``, or the quantized ``"int8"``, ``"int4"``, ``"fp8_e4m3"`` and ``"fp8_e5m2"``
        (``head_dim`` a multiple of 32);
        ``options`` are KVCache's others (``layout``, ``block_size``, ``num_blocks``,
        ``key_dtype``, ``value_dtype``, ``key_quantization``)."""
        return KVCache(self.num_heads, self.head_dim, max_sequence_length, max_sequences=max_sequences,
                       dtype=dtype, **options)  # fmt: skip

    def forward_cached(self, x, cache, sequences):
        """Self-attention of new tokens over what a KV cache holds: one decoding step, or a prefill.

        ``x`` holds each sequence's t new tokens, [N, t, E] with ``batch_first`` (else [t, N, E]),
        or [t, E] with one sequence id. Their keys and values are projected and appended to
        ``cache`` (``make_cache``, any storage dtype, the quantized ones included), then each new token
        attends causally over its sequence's cached tokens, itself included: the output, shaped
        like ``x``, is ``forward(x, x, x, is_causal=True)``'s rows for those tokens computed over
        the whole sequence so far, without recomputing the earlier tokens' keys and values.
        ``sequences`` is an id from ``cache.add_sequence()`` for [t, E], else a list of N ids.

        Decoding is inference: no dropout, and no gradient (the output does not require grad).
        Not for modules with ``add_bias_kv``, ``add_zero_attn`` or ``kdim``/``vdim`` other than
        ``embed_dim`` (their keys are not the tokens'). Raises ValueError naming the argument.
        """
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache: expected an attnkit.KVCache, got {type(cache).__name__}")
        if self.bias_k is not None or self.add_zero_attn or not self._qkv_same_embed_dim:
            raise ValueError(
                "forward_cached: self-attention only; this module has "
                + ("add_bias_kv" if self.bias_k is not None else "add_zero_attn" if self.add_zero_attn else
                   f"kdim {self.kdim} / vdim {self.vdim} != embed_dim {self.embed_dim}")  # fmt: skip
            )
        H, d = self.num_heads, self.head_dim
        if (cache.num_kv_heads, cache.head_dim, cache.value_dim) != (H, d, d):
            raise ValueError(
                f"cache: holds {cache.num_kv_heads} heads of head_dim {cache.head_dim}, value_dim {cache.value_dim}; "
                f"this module needs {H} heads of {d} (make_cache makes one)"
            )
        single = x.dim() == 2
        if x.dim() not in (2, 3) or x.shape[-1] != self.embed_dim:
            raise ValueError(
                f"x: expected [N, t, E] (batch_first), [t, N, E] or [t, E] with E = embed_dim {self.embed_dim}, "
                f"got {list(x.shape)}"
            )
        if single:
            if isinstance(sequences, (list, tuple)):
                raise ValueError("sequences: one id for x of [t, E] (a list goes with [N, t, E] or [t, N, E])")
            xb = x.unsqueeze(0)
        else:
            if not isinstance(sequences, (list, tuple)):
                raise ValueError(f"sequences: a list of {x.shape[0 if self.batch_first else 1]} ids for x of {list(x.shape)}")
            xb = x if self.batch_first else x.transpose(0, 1)
            if xb.shape[0] != len(sequences):
                raise ValueError(f"sequences: {len(sequences)} ids for a batch of {xb.shape[0]} (x {list(x.shape)})")
        with torch.no_grad():
            q, k, v = self._project(xb, xb, xb)
            # [N, t, H·d] → [N, H, t, d] views: the cache and attend read any strides.
            q4, k4, v4 = (y.unflatten(-1, (H, d)).transpose(1, 2) for y in (q, k, v))
            ids = [sequences] if single else list(sequences)
            cache.append(ids, k4, v4)
            attn = attend(cache, ids, q4)
            out = F.linear(attn.transpose(1, 2).flatten(2), self.out_proj.weight, self.out_proj.bias)
        if single:
            return out.squeeze(0)
        return out if self.batch_first else out.transpose(0, 1)

    def _project(self, query, key, value):
        """The in-projections, as torch computes them (one matmul for self-attention)."""
        E = self.embed_dim
        if self._qkv_same_embed_dim:
            w, b = self.in_proj_weight, self.in_proj_bias
            if query is key and key is value:
                return F.linear(query, w, b).chunk(3, dim=-1)
            wq, wk, wv = w.chunk(3)
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
            b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[:E], b[E : 2 * E], b[2 * E :])
        return F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)

    def _mask(self, key_padding_mask, attn_mask, is_causal, N, L, S, extra, dtype):
        """torch's two masks (True = may NOT attend, or floats added) merged into one attnkit mask
        broadcastable to [N, H, L, S + extra] (True = may attend, or floats), and whether the
        kernel applies the causal mask itself."""
        H, total = self.num_heads, S + extra
        if attn_mask is not None:
            _check_mask("attn_mask", attn_mask)
            if attn_mask.dim() == 2 and tuple(attn_mask.shape) == (L, S):
                attn_mask = attn_mask.view(1, 1, L, S)
            elif attn_mask.dim() == 3 and tuple(attn_mask.shape) == (N * H, L, S):
                attn_mask = attn_mask.view(N, H, L, S)
            else:
                raise ValueError(
                    f"attn_mask: expected [L, S] = {[L, S]} or [N·num_heads, L, S] = {[N * H, L, S]}, "
                    f"got {list(attn_mask.shape)}"
                )
            if is_causal and not extra and not attn_mask.requires_grad:
                # torch's contract: the hint says attn_mask is the causal mask, so the kernel applies
                # causality itself and skips the masked half of the work (torch's SDPA path does too).
                attn_mask = None
            else:
                is_causal = False  # the mask is applied as given (its gradient, or appended keys)
        elif is_causal and extra:
            # Causal over the given keys; the appended bias and zero keys stay visible to every query.
            i, j = torch.arange(L).view(L, 1), torch.arange(S).view(1, S)
            attn_mask = (j > i).view(1, 1, L, S)
            is_causal = False
        if key_padding_mask is not None:
            _check_mask("key_padding_mask", key_padding_mask)
            if tuple(key_padding_mask.shape) != (N, S):
                raise ValueError(f"key_padding_mask: expected [N, S] = {[N, S]}, got {list(key_padding_mask.shape)}")
            key_padding_mask = key_padding_mask.view(N, 1, 1, S)

        masks = [m for m in (attn_mask, key_padding_mask) if m is not None]
        if not masks:
            return None, is_causal
        if all(m.dtype == torch.bool for m in masks):
            keep = ~masks[0] if len(masks) == 1 else ~(masks[0] | masks[1])
            return (F.pad(keep, (0, extra), value=True) if extra else keep), is_causal
        # Floats (a bool mask among them becomes −inf where it masks), summed as torch sums them.
        floats = [
            torch.zeros(m.shape, dtype=dtype).masked_fill_(m, float("-inf")) if m.dtype == torch.bool else m
            for m in masks
        ]
        bias = floats[0] if len(floats) == 1 else floats[0] + floats[1]
        return (F.pad(bias, (0, extra)) if extra else bias), is_causal


def _check_mask(name, mask):
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(f"{name}: expected a bool or floating tensor, got {mask.dtype}")
