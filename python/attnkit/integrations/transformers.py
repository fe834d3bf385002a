"""attnkit as an attention implementation of Hugging Face transformers.

Importing this module registers the implementation ``"attnkit"`` with transformers' attention
interface (and the masks it builds, transformers' boolean SDPA masks, with its mask interface)::

    import attnkit.integrations.transformers
    model = AutoModel.from_pretrained(path, attn_implementation="attnkit")
    # or, on a loaded model: model.set_attn_implementation("attnkit")

Every attention layer of the model then calls ``attention_forward`` below: one attnkit call per
layer, forward and backward, with the mask transformers made (padding, causal, sliding window),
grouped-query attention without repeating K and V, the model's scaling and softcap, learned
attention sinks (gpt-oss's ``s_aux``, trained through autograd), dropout in training, and the
attention weights when the model asks for them (``output_attentions``). What attnkit does not do
(a head mask, for one) raises an error naming it: never a silent fallback.
Needs transformers 5 (``pip install .[transformers]``); importing attnkit itself never imports it.
"""

from __future__ import annotations

import transformers
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .. import functional
from .. import torch as attnkit_torch

__all__ = ["NAME", "attention_forward", "register"]

NAME = "attnkit"

# Keyword arguments a model may pass that change what attention computes and that attnkit cannot
# honour: named in the error rather than ignored.
_UNSUPPORTED = {
    "head_mask": "a head mask",
}


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                      position_bias=None, **kwargs):  # fmt: skip
    """transformers' attention function signature: query [B, H, L, d], key and value [B, Hkv, S, d]
    (Hkv dividing H), attention_mask None, bool [B or 1, 1 or H, L, S] (True = attend) or float
    (added to the scores) → (output [B, L, H, d], weights [B, H, L, S] or None)."""
    for name, what in _UNSUPPORTED.items():
        if kwargs.get(name) is not None:
            raise ValueError(f"attnkit attention: {what} is not supported by attnkit")
    q_length, kv_length = query.shape[2], key.shape[2]
    # transformers' own rule (as its SDPA path): the layer's causality applies through the mask when
    # there is one, else through the flag; a single query token sees every cached key.
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = bool(q_length > 1 and attention_mask is None and is_causal)
    mask = attention_mask
    if mask is not None and mask.shape[-1] != kv_length:
        mask = mask[..., :kv_length]  # a static cache's mask can be longer than the keys handed over
    if position_bias is not None:  # a learned relative bias (T5-style): added to the scores
        from transformers.integrations.sdpa_attention import create_position_bias_mask

        mask = create_position_bias_mask(position_bias, mask, is_causal, query, key)
        is_causal = False
    softcap = kwargs.get("softcap")
    # Learned sinks, one logit per query head: gpt-oss passes them as s_aux.
    sinks = kwargs.get("s_aux", kwargs.get("sinks"))
    dropout_p = float(dropout or 0.0)
    call = functional._prepare(
        query, key, value, mask, dropout_p, is_causal, scaling, query.shape[1] != key.shape[1], "top_left",
        None, None, softcap, None, attnkit_torch.dropout_seed(dropout_p), sinks,
    )  # fmt: skip
    out, _, weights = functional._run(call, query, key, value, mask, None, sinks,
                                      probs=bool(kwargs.get("output_attentions", False)))  # fmt: skip
    if weights is not None:
        weights = weights.to(query.dtype)
    return out.transpose(1, 2).contiguous(), weights


def register(name: str = NAME) -> None:
    """Registers ``attention_forward`` (and transformers' boolean SDPA masks) under ``name``; done
    for ``"attnkit"`` on import. Registering again replaces the entry."""
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)


def _check_version() -> None:
    major = int(transformers.__version__.split(".")[0])
    if major < 5:
        raise ImportError(
            f"attnkit.integrations.transformers needs transformers 5 or newer, found {transformers.__version__}"
        )


_check_version()
register()
