"""Tests of attnkit.KVCache and attnkit.attend (numpy arrays, and torch CPU tensors when torch is
installed).

Every attend result is checked against the same attention on each sequence's full keys and values:
attnkit.scaled_dot_product_attention(..., is_causal=True, causal_alignment="bottom_right",
enable_gqa=True) on float64 inputs, which runs attnkit's float64 reference kernel (itself checked
against a numpy oracle in test_sdpa.py). The tolerance is the project's accuracy rule: RMS error at
most twice that of a naive float32 kernel (written here) on the same rounded inputs, plus
1e-7·max(1, |reference|). The test keeps its own record of what each sequence should hold, rounded
to the storage dtype independently of the library.

Inputs are random with a fresh seed per run, printed with a failing test's output;
ATTNKIT_TEST_SEED=<n> replays a run.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

import attnkit

# `rng`: a generator per test, from conftest.py.



# ---- rounding, the reference and the naive kernel ----------------------------------------------


def round_to(x, dtype):
    """x rounded to float32, float16 or bfloat16 (nearest, ties to even), returned as float64.
    bfloat16 is done on the float32 bits, so that these tests need neither torch nor the library."""
    x = np.asarray(x, np.float64)
    if dtype == "bfloat16":
        bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    return x.astype(dtype).astype(np.float64)


def reference(q, k, v, **options):
    """(out, lse) of one sequence: q [Hq, n, d] over its full k [Hkv, m, d], v [Hkv, m, dv], in float64."""
    out, lse = attnkit.scaled_dot_product_attention(
        np.asarray(q, np.float64)[None], np.asarray(k, np.float64)[None], np.asarray(v, np.float64)[None],
        is_causal=True, causal_alignment="bottom_right", enable_gqa=True, return_lse=True, **options,
    )  # fmt: skip
    return out[0], lse[0]


def naive(q, k, v, dtype=np.float32, scale=None, window=None, alibi_slopes=None, softcap=None, sinks=None):
    """The same attention written out in `dtype`: scores, softcap, ALiBi, bottom-right causal and
    window masks, softmax (with one more logit per head, its sink, weighting no value), weighted sum."""
    q, k, v = (np.asarray(x).astype(dtype) for x in (q, k, v))
    Hq, n, d = q.shape
    Hkv, m = k.shape[:2]
    k, v = np.repeat(k, Hq // Hkv, axis=0), np.repeat(v, Hq // Hkv, axis=0)
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * dtype(1 / math.sqrt(d) if scale is None else scale)
    if softcap:
        s = dtype(softcap) * np.tanh(s / dtype(softcap))
    p, j = np.arange(n)[:, None] + (m - n), np.arange(m)[None, :]  # query i sits at p = m − n + i
    if alibi_slopes is not None:
        s = s - np.asarray(alibi_slopes, np.float32).astype(dtype)[:, None, None] * np.abs(p - j).astype(dtype)
    visible = j <= p
    if window is not None:
        left, right = (-1 if x is None else x for x in window)
        visible &= (j >= p - left) if left >= 0 else True
        visible &= (j <= p + right) if right >= 0 else True
    s = np.where(visible, s, -np.inf)
    top = s.max(axis=-1, keepdims=True, initial=-np.inf)
    sink = None if sinks is None else np.asarray(sinks, np.float32).astype(dtype)[:, None, None]
    if sink is not None:
        top = np.maximum(top, sink)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - np.where(top == -np.inf, 0, top))
    total = e.sum(axis=-1, keepdims=True) + (0 if sink is None else np.exp(sink - top))
    return np.matmul(e / np.where(total == 0, 1, total), v)


def to64(x):
    """A float64 numpy copy of a numpy array or torch tensor (numpy has no bfloat16)."""
    return x.detach().double().numpy() if hasattr(x, "detach") else np.asarray(x, np.float64)


def rms(x):
    return float(np.sqrt(np.mean(np.square(x)))) if np.size(x) else 0.0


def check_entry(out, lse, q, k, v, out_dtype, context, **options):
    """attend's output (and lse, unless None) for one sequence against the reference, by the accuracy
    rule; k and v are what the cache should hold (float64 of the rounded values)."""
    out = np.asarray(out, np.float64)
    ref, ref_lse = reference(q, k, v, **options)
    assert out.shape == ref.shape, context
    # The naive kernel is itself checked, in float64, against the reference: a wrong naive kernel
    # would make the tolerance meaningless.
    assert np.allclose(naive(q, k, v, np.float64, **options), ref, rtol=0, atol=1e-10), f"{context}: naive kernel"
    if out_dtype == "float64":
        assert np.all(np.abs(out - ref) <= 1e-11 * max(1.0, float(np.abs(ref).max(initial=0)))), context
    else:
        lower = round_to(naive(q, k, v, **options), out_dtype)
        floor = 1e-7 * max(1.0, float(np.abs(ref).max(initial=0)))
        err, naive_err = rms(out - ref), rms(lower - ref)
        assert np.isfinite(out).all(), f"{context}: non-finite output"
        assert err <= 2 * naive_err + floor, (
            f"{context}: RMS error {err:.3g} > 2 × naive {naive_err:.3g} + {floor:.3g}"
        )
    if lse is not None:
        lse = np.asarray(lse, np.float64)
        assert lse.shape == ref_lse.shape, context
        assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse)), f"{context}: −inf rows differ"
        finite = np.isfinite(ref_lse)
        assert np.all(np.abs(lse[finite] - ref_lse[finite]) <= 1e-5 * np.maximum(1, np.abs(ref_lse[finite]))), context


class Shadow:
    """What each sequence of a cache should hold: the appended rows, rounded to its storage dtype."""

    def __init__(self, cache):
        self.cache, self.keys, self.values = cache, {}, {}

    def add(self):
        s = self.cache.add_sequence()
        self.keys[s] = np.zeros((self.cache.num_kv_heads, 0, self.cache.head_dim))
        self.values[s] = np.zeros((self.cache.num_kv_heads, 0, self.cache.value_dim))
        return s

    def free(self, s):
        self.cache.free_sequence(s)
        del self.keys[s], self.values[s]

    def append(self, sequences, keys, values):
        """cache.append(sequences, keys, values), recorded; one sequence (int) or a list."""
        self.cache.append(sequences, keys, values)
        single = isinstance(sequences, int)
        for b, s in enumerate([sequences] if single else sequences):
            k, v = (to64(x) if single else to64(x)[b] for x in (keys, values))
            self.keys[s] = np.concatenate([self.keys[s], round_to(k, self.cache.dtype)], axis=1)
            self.values[s] = np.concatenate([self.values[s], round_to(v, self.cache.dtype)], axis=1)

    def check_contents(self, context=""):
        assert sorted(self.cache.sequences) == sorted(self.keys), context
        for s in self.keys:
            assert self.cache.length(s) == self.keys[s].shape[1], context
            np.testing.assert_array_equal(self.cache.keys(s), self.keys[s], err_msg=context)
            np.testing.assert_array_equal(self.cache.values(s), self.values[s], err_msg=context)

    def check_attend(self, sequences, q, out_dtype, context, return_lse=True, **options):
        """attend(cache, sequences, q) against the reference for each entry."""
        result = attnkit.attend(self.cache, sequences, q, return_lse=return_lse, **options)
        out, lse = result if return_lse else (result, None)
        assert out.dtype == q.dtype and out.flags.c_contiguous, context
        single = isinstance(sequences, int)
        q64 = np.asarray(q, np.float64)
        for b, s in enumerate([sequences] if single else sequences):
            entry = (lambda x: x) if single else (lambda x: x[b])
            check_entry(entry(out), None if lse is None else entry(lse), entry(q64), self.keys[s], self.values[s],
                        out_dtype, f"{context}, entry {b} (sequence {s})", **options)  # fmt: skip
        return out, lse


def gaussian(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


# ---- the decode loop ---------------------------------------------------------------------------

LAYOUTS = {"contiguous": {}, "paged": {"block_size": 8}}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("storage", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("query_dtype", ["float32", "float16", "float64"])
def test_decode_loop_matches_attention_on_the_full_keys(rng, layout, storage, query_dtype):
    Hkv, group, d, dv = 2, 3, 20, 12  # GQA, value width ≠ key width, widths off any vector size
    Hq = Hkv * group
    cache = attnkit.KVCache(Hkv, d, 48, value_dim=dv, max_sequences=4, layout=layout, dtype=storage, **LAYOUTS[layout])
    shadow = Shadow(cache)
    sequences = [shadow.add() for _ in range(3)]

    # Prefill: each prompt on its own (different lengths, one crossing block boundaries), its
    # queries attending causally over themselves.
    for s, prompt in zip(sequences, (5, 17, 1)):
        shadow.append(s, gaussian(rng, (Hkv, prompt, d)), gaussian(rng, (Hkv, prompt, dv)))
        shadow.check_attend(s, gaussian(rng, (Hq, prompt, d), query_dtype), query_dtype, f"prefill {s}")

    # Decoding: every sequence grows by t tokens per step in one batched append; one batched attend.
    for step, t in enumerate((1, 1, 3, 1, 2)):
        shadow.append(sequences, gaussian(rng, (3, Hkv, t, d)), gaussian(rng, (3, Hkv, t, dv)))
        order = sequences if step % 2 == 0 else sequences[::-1]  # entry b ↔ sequences[b], any order
        shadow.check_attend(order, gaussian(rng, (3, Hq, t, d), query_dtype), query_dtype, f"step {step}")
    assert [cache.length(s) for s in sequences] == [13, 25, 9]
    shadow.check_contents(f"{layout} {storage}")


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize(
    ("key_dtype", "value_dtype"),
    [("int8", "int8"), ("int4", "int4"), ("int8", "int4"), ("int4", "float16"), ("fp8_e4m3", "fp8_e5m2"),
     ("fp8_e5m2", "int8")],  # fmt: skip
)
def test_quantized_storage_holds_values_within_half_a_step_and_attends_over_them(rng, layout, key_dtype, value_dtype):
    Hkv, Hq, d, dv = 2, 6, 64, 32  # widths of whole blocks of 32 features
    cache = attnkit.KVCache(Hkv, d, 48, value_dim=dv, max_sequences=2, layout=layout, dtype=key_dtype,
                            value_dtype=value_dtype, **LAYOUTS[layout])  # fmt: skip
    assert (cache.dtype, cache.key_dtype, cache.value_dtype) == (key_dtype, key_dtype, value_dtype)
    assert f"dtype={key_dtype!r}" in repr(cache) and ("value_dtype" in repr(cache)) == (value_dtype != key_dtype)
    s = cache.add_sequence()
    k, v = gaussian(rng, (Hkv, 7, d)), gaussian(rng, (Hkv, 7, dv))
    cache.append(s, k, v)
    cache.append([s], gaussian(rng, (1, Hkv, 2, d)), gaussian(rng, (1, Hkv, 2, dv)))
    stored_k, stored_v = cache.keys(s), cache.values(s)
    assert stored_k.dtype == np.float64 and stored_k.shape == (Hkv, 9, d)
    for stored, x, dtype in ((stored_k, k, key_dtype), (stored_v, v, value_dtype)):
        blocks = x.reshape(Hkv, 7, -1, 32).astype(np.float64)
        if dtype == "int8":
            step = np.abs(blocks).max(axis=-1, keepdims=True) / 127
        elif dtype == "int4":
            step = np.ptp(blocks, axis=-1, keepdims=True) / 15
        elif dtype.startswith("fp8"):  # the format's spacing at x / scale, the scale a power of two
            e4m3 = dtype == "fp8_e4m3"
            largest, mantissa_bits, smallest_normal = (448.0, 3, 2.0**-6) if e4m3 else (57344.0, 2, 2.0**-14)
            scale = np.maximum(2.0 ** np.ceil(np.log2(np.abs(blocks).max(axis=-1, keepdims=True) / largest)), 2.0**-24)
            binade = np.maximum(np.abs(blocks) / scale, smallest_normal)
            step = 2.0 ** (np.floor(np.log2(binade)) - mantissa_bits) * scale
        else:  # f16's spacing: 2^-10 relative for normals, 2^-24 absolute below 2^-14 (subnormals)
            step = np.maximum(np.abs(blocks) * 2.0**-10, 2.0**-24)
        got = np.asarray(stored[:, :7], np.float64).reshape(blocks.shape)
        assert np.all(np.abs(got - blocks) <= step / 2 * 1.01 + 1e-3 * np.abs(blocks)), dtype
    # attend over the stored values, by the accuracy rule; prefill (n = 9) and a decode step (n = 1).
    for n in (9, 1):
        q = gaussian(rng, (Hq, n, d))
        out, lse = attnkit.attend(cache, s, q, return_lse=True)
        check_entry(out, lse, q.astype(np.float64), stored_k, np.asarray(stored_v, np.float64), "float32", f"n = {n}")


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("key_dtype", ["int8", "int4"])
def test_keys_quantised_per_channel_keep_each_channels_step_and_attend_over_them(rng, layout, key_dtype):
    Hkv, Hq, d = 2, 4, 64
    paged = {"block_size": 64} if layout == "paged" else {}
    cache = attnkit.KVCache(Hkv, d, 100, max_sequences=1, layout=layout, dtype=key_dtype,
                            key_quantization="per_channel", **paged)  # fmt: skip
    assert cache.key_quantization == "per_channel" and "key_quantization='per_channel'" in repr(cache)
    s = cache.add_sequence()
    k = gaussian(rng, (Hkv, 70, d)) * np.where(np.arange(d) % 16 == 3, 20.0, 1.0).astype(np.float32)
    cache.append(s, k[:, :40], gaussian(rng, (Hkv, 40, d)))
    cache.append(s, k[:, 40:], gaussian(rng, (Hkv, 30, d)))
    stored = np.asarray(cache.keys(s), np.float64)
    # Tokens 0 … 63 in two groups of 32, each channel with its own step over its group; 64 … 69 per token.
    groups = k[:, :64].astype(np.float64).reshape(Hkv, 2, 32, d)
    if key_dtype == "int8":
        step = np.abs(groups).max(axis=2, keepdims=True) / 127
    else:
        step = np.ptp(groups, axis=2, keepdims=True) / 15
    got = stored[:, :64].reshape(groups.shape)
    assert np.all(np.abs(got - groups) <= step / 2 * 1.01 + 1e-3 * np.abs(groups))
    ordinary = np.arange(d) % 16 != 3
    assert np.abs(got - groups)[..., ordinary].max() < 0.3, "the outlier channels do not set the others' step"
    q = gaussian(rng, (Hq, 1, d))
    out, lse = attnkit.attend(cache, s, q, return_lse=True)
    check_entry(out, lse, q.astype(np.float64), stored, np.asarray(cache.values(s), np.float64), "float32", "decode")


def test_key_quantization_is_checked():
    expect(lambda: attnkit.KVCache(1, 64, 8, dtype="int8", key_quantization="per_block"), ValueError,
           "key_quantization: expected")  # fmt: skip
    expect(lambda: attnkit.KVCache(1, 64, 8, key_quantization="per_channel"), ValueError,
           "per_channel quantises int8 or int4 keys, but dtype is f32")  # fmt: skip
    expect(lambda: attnkit.KVCache(1, 64, 64, layout="paged", block_size=16, dtype="int4", key_quantization="per_channel"),
           ValueError, "block_size: 16 with per_channel keys")  # fmt: skip
    assert attnkit.KVCache(1, 64, 64, layout="paged", dtype="int4", key_quantization="per_channel").block_size == 32


def test_quantized_storage_needs_whole_blocks_and_string_names():
    expect(lambda: attnkit.KVCache(1, 48, 8, dtype="int8"), ValueError, "head_dim: 48 is not a multiple of 32")
    expect(lambda: attnkit.KVCache(1, 64, 8, value_dim=16, value_dtype="int4"), ValueError,
           "value_dim: 16 is not a multiple of 32")  # fmt: skip
    expect(lambda: attnkit.KVCache(1, 64, 8, key_dtype="int2"), TypeError, "key_dtype: the cache stores .* got int2")
    expect(lambda: attnkit.KVCache(1, 64, 8, dtype=np.int8), TypeError, "dtype: .* got int8")  # a numpy int8 is not int8 storage


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_options_scale_window_alibi_softcap_sinks(rng, layout):
    Hkv, Hq, d = 2, 4, 16
    cache = attnkit.KVCache(Hkv, d, 64, max_sequences=2, layout=layout, **LAYOUTS[layout])
    shadow = Shadow(cache)
    a, b = shadow.add(), shadow.add()
    shadow.append(a, gaussian(rng, (Hkv, 30, d)), gaussian(rng, (Hkv, 30, d)))
    shadow.append(b, gaussian(rng, (Hkv, 11, d)), gaussian(rng, (Hkv, 11, d)))
    slopes = [float(x) for x in rng.uniform(0.05, 0.5, Hq)]
    sinks = [float(x) for x in rng.normal(0.0, 2.0, Hq)]
    option_sets = [
        {"sinks": sinks},
        {"scale": 0.9},
        {"window": (4, 0)},
        {"window": (7, None)},
        {"alibi_slopes": slopes},
        {"softcap": 2.0, "scale": 1.5},  # large scores, so that the cap changes them
        {"scale": 0.7, "window": (9, -1), "alibi_slopes": slopes, "softcap": 5.0, "sinks": sinks},
    ]
    for options in option_sets:
        for n in (1, 3):
            shadow.check_attend([a, b], gaussian(rng, (2, Hq, n, d)), "float32", f"{options}, n={n}", **options)
    # A window narrower than the history changes the result (so the option is not ignored).
    q = gaussian(rng, (2, Hq, 1, d))
    assert not np.allclose(attnkit.attend(cache, [a, b], q, window=(2, 0)), attnkit.attend(cache, [a, b], q))


def test_queries_before_the_first_key_give_zeros_and_every_element_is_written(rng):
    Hkv, Hq, d = 1, 2, 8
    cache = attnkit.KVCache(Hkv, d, 16, max_sequences=2, layout="paged", block_size=4)
    shadow = Shadow(cache)
    a, b = shadow.add(), shadow.add()
    shadow.append([a, b], gaussian(rng, (2, Hkv, 2, d)), gaussian(rng, (2, Hkv, 2, d)))
    shadow.append(b, gaussian(rng, (Hkv, 5, d)), gaussian(rng, (Hkv, 5, d)))
    # n = 4 queries over a sequence of 2 tokens: the first two sit before the first key.
    q = gaussian(rng, (2, Hq, 4, d))
    out, lse = shadow.check_attend([a, b], q, "float32", "n > length")
    assert np.all(out[0, :, :2] == 0) and np.all(np.isneginf(lse[0, :, :2]))
    assert np.all(np.isfinite(lse[1]))
    # Through the C++ call with outputs poisoned with NaN: every element is written.
    out = np.full((2, Hq, 4, d), np.nan, np.float32)
    lse = np.full((2, Hq, 4), np.nan, np.float32)
    attnkit._core.attend(cache._core, [a, b], q, out, lse=lse)
    assert not np.isnan(out).any() and not np.isnan(lse).any()


def test_strided_inputs_are_read_in_place(rng):
    Hkv, d = 3, 8
    cache = attnkit.KVCache(Hkv, d, 32, max_sequences=2, layout="paged", block_size=4)
    shadow = Shadow(cache)
    a, b = shadow.add(), shadow.add()
    keys = gaussian(rng, (5, Hkv, d)).transpose(1, 0, 2)  # [Hkv, t, d] stored token-major
    values = gaussian(rng, (Hkv, 5, 2 * d))[:, ::-1, ::2]  # negative and doubled strides
    shadow.append(a, keys, values)
    batched = np.broadcast_to(gaussian(rng, (1, Hkv, 3, d)), (2, Hkv, 3, d))  # zero stride, read-only
    shadow.append([a, b], batched, batched)
    shadow.check_contents("strided")
    q = gaussian(rng, (2, 2, 6, d * 2))[..., ::2].transpose(0, 2, 1, 3)  # [B, Hq, n, d] from [B, n, Hq, 2d]
    shadow.check_attend([a, b], q, "float32", "strided query")


# ---- sequences come and go; full caches refuse and stay unchanged ------------------------------


def test_a_freed_sequence_returns_its_blocks_and_they_are_reused(rng):
    Hkv, Hq, d = 2, 4, 8
    cache = attnkit.KVCache(Hkv, d, 24, max_sequences=3, layout="paged", block_size=4, num_blocks=6)
    assert (cache.num_blocks, cache.free_blocks, cache.block_size) == (6, 6, 4)
    shadow = Shadow(cache)
    a, b, c = shadow.add(), shadow.add(), shadow.add()
    shadow.append(a, gaussian(rng, (Hkv, 10, d)), gaussian(rng, (Hkv, 10, d)))  # 3 blocks
    shadow.append(b, gaussian(rng, (Hkv, 8, d)), gaussian(rng, (Hkv, 8, d)))  # 2 blocks
    assert cache.free_blocks == 1 and cache.room(a) == 2 + 4 and cache.room(c) == 4

    shadow.free(a)
    assert a not in cache and cache.sequences == [b, c] and cache.free_blocks == 4
    with pytest.raises(ValueError, match=f"sequence {a} is not in the cache \\(it was freed\\)"):
        cache.length(a)
    # c takes a's blocks, which still hold a's rows: c must see only its own.
    shadow.append(c, gaussian(rng, (Hkv, 13, d)), gaussian(rng, (Hkv, 13, d)))
    assert cache.free_blocks == 0
    shadow.check_contents("after reuse")
    shadow.check_attend([c, b], gaussian(rng, (2, Hq, 1, d)), "float32", "after reuse")
    d_ = shadow.add()
    assert d_ not in (a, b, c)  # ids are never reused


def test_contiguous_slots_are_reused(rng):
    cache = attnkit.KVCache(1, 4, 8, max_sequences=2)
    assert (cache.layout, cache.block_size, cache.num_blocks, cache.free_blocks) == ("contiguous", None, None, None)
    shadow = Shadow(cache)
    a, b = shadow.add(), shadow.add()
    shadow.append([a, b], gaussian(rng, (2, 1, 8, 4)), gaussian(rng, (2, 1, 8, 4)))
    shadow.free(a)
    c = shadow.add()
    assert cache.length(c) == 0 and cache.room(c) == 8
    shadow.append(c, gaussian(rng, (1, 3, 4)), gaussian(rng, (1, 3, 4)))
    shadow.check_contents("contiguous reuse")
    shadow.check_attend(c, gaussian(rng, (2, 3, 4)), "float32", "contiguous reuse")


def snapshot(cache):
    return (
        cache.sequences, cache.free_blocks,
        {s: (cache.length(s), cache.room(s), cache.keys(s).tobytes(), cache.values(s).tobytes())
         for s in cache.sequences},
    )  # fmt: skip


def check_capacity_error(call, cache, match):
    before = snapshot(cache)
    with pytest.raises(ValueError, match=match) as error:
        call()
    assert error.value.code == "capacity_exceeded"
    assert snapshot(cache) == before, "a refused append changed the cache"


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_capacity_errors_leave_the_cache_unchanged(rng, layout):
    d = 4
    paged = {"block_size": 4, "num_blocks": 4} if layout == "paged" else {}
    cache = attnkit.KVCache(2, d, 12, max_sequences=2, layout=layout, **paged)
    shadow = Shadow(cache)
    a, b = shadow.add(), shadow.add()
    shadow.append([a, b], gaussian(rng, (2, 2, 3, d)), gaussian(rng, (2, 2, 3, d)))
    check_capacity_error(cache.add_sequence, cache, "all 2 sequences of the cache are in use")

    # Past a sequence's limit, in a batched append: neither grows.
    shadow.append(a, gaussian(rng, (2, 7, d)), gaussian(rng, (2, 7, d)))
    assert cache.room(a) == 2
    keys, values = gaussian(rng, (2, 2, 3, d)), gaussian(rng, (2, 2, 3, d))
    check_capacity_error(lambda: cache.append([b, a], keys, values), cache,
                         f"sequence {a} holds 10 tokens; 3 more would pass its limit of 12")  # fmt: skip
    check_capacity_error(lambda: cache.append(a, keys[0], values[0]), cache, f"sequence {a} holds 10 tokens")
    if layout == "paged":  # a holds 3 blocks, b 1: the pool of 4 is empty, though b is far from its limit
        assert cache.free_blocks == 0 and cache.room(b) == 1
        check_capacity_error(lambda: cache.append(b, keys[0, :, :2], values[0, :, :2]), cache,
                             "need 1 new blocks of 4 tokens, but only 0 of the pool's 4 are free")  # fmt: skip
    # What room() says fits does fit.
    room = cache.room(b)
    shadow.append(b, gaussian(rng, (2, room, d)), gaussian(rng, (2, room, d)))
    check_capacity_error(lambda: cache.append(b, keys[0, :, :1], values[0, :, :1]), cache, f"append: .*{b}")
    assert cache.room(a) == 2 and cache.room(b) == 0
    shadow.check_contents(layout)


# ---- the API's surface and its errors ----------------------------------------------------------


def test_configuration_and_sequences():
    cache = attnkit.KVCache(4, 16, 100, max_sequences=3, layout="paged", dtype=np.float16)
    assert (cache.num_kv_heads, cache.head_dim, cache.value_dim, cache.max_sequence_length) == (4, 16, 16, 100)
    assert (cache.max_sequences, cache.layout, cache.dtype, cache.block_size) == (3, "paged", "float16", 16)
    assert cache.num_blocks == cache.free_blocks == 3 * math.ceil(100 / 16)  # the default pool: all at full length
    a, b = cache.add_sequence(), cache.add_sequence()
    assert cache.sequences == [a, b] and a in cache and 99 not in cache and "a" not in cache
    assert cache.length(a) == 0 and cache.keys(a).shape == (4, 0, 16) and cache.keys(a).dtype == np.float16
    assert "layout='paged'" in repr(cache) and f"sequences={[a, b]}" in repr(cache)
    bf16 = attnkit.KVCache(1, 2, 3, dtype="bfloat16")
    s = bf16.add_sequence()
    bf16.append(s, np.full((1, 1, 2), 1 + 2**-9, np.float32), np.ones((1, 1, 2), np.float64))
    assert bf16.keys(s).dtype == np.float32 and bf16.keys(s)[0, 0, 0] == 1.0  # rounded to bfloat16's 8 bits


def expect(call, error, match, code=None):
    with pytest.raises(error, match=match) as caught:
        call()
    if code is not None:
        assert caught.value.code == code


def test_bad_configurations_name_the_argument():
    K = attnkit.KVCache
    expect(lambda: K(0, 8, 16), ValueError, "num_kv_heads: must be > 0, got 0", "invalid_argument")
    expect(lambda: K(1, 8, 0), ValueError, "max_sequence_length: must be > 0")
    expect(lambda: K(1, 8.0, 16), TypeError, "head_dim: expected an int, got float")
    expect(lambda: K(1, 8, 16, layout="ring"), ValueError, """layout: expected "contiguous" or "paged", got 'ring'""")
    expect(lambda: K(1, 8, 16, dtype="float64"), TypeError,
           "dtype: the cache stores float32, float16, bfloat16 .*; got float64")
    expect(lambda: K(1, 8, 16, dtype=np.int8), TypeError, "dtype: .* got int8")
    expect(lambda: K(1, 8, 16, dtype=object()), TypeError, "dtype: expected a dtype name")
    expect(lambda: K(1, 8, 16, block_size=8), ValueError, 'block_size: applies to layout="paged" only')
    expect(lambda: K(1, 8, 16, layout="paged", block_size=6), ValueError, "block_size: must be a power of two")
    expect(lambda: K(1, 8, 16, layout="paged", num_blocks=0), ValueError, "num_blocks: must be > 0")


def test_bad_appends_name_the_argument(rng):
    cache = attnkit.KVCache(2, 8, 16, value_dim=4, max_sequences=2)
    a, b = cache.add_sequence(), cache.add_sequence()
    append = cache.append
    k, v = gaussian(rng, (2, 3, 8)), gaussian(rng, (2, 3, 4))
    kk, vv = np.stack([k, k]), np.stack([v, v])
    expect(lambda: append(a, k[None], v), ValueError,
           r"keys: expected \[Hkv, t, d\] = \[2, t, 8\] .*got \[1, 2, 3, 8\]")
    expect(lambda: append([a, b], k, v), ValueError,
           r"keys: expected \[B, Hkv, t, d\] = \[2, 2, t, 8\] .*got \[2, 3, 8\]")
    expect(lambda: append(a, gaussian(rng, (3, 3, 8)), v), ValueError, r"keys: expected .* got \[3, 3, 8\]")
    expect(lambda: append(a, k, k), ValueError,
           r"values: expected \[Hkv, t, d\] = \[2, t, 4\] .*value_dim\), got \[2, 3, 8\]")
    expect(lambda: append(a, k, v[:, :2]), ValueError, "values: 2 new tokens, but keys has 3")
    expect(lambda: append(a, k.astype(np.int32), v), TypeError, "keys: dtype int32 is not supported")
    expect(lambda: append(a, k, v.tolist()), TypeError, "values: expected a numpy.ndarray like keys, got list")
    expect(lambda: append(a, k.tolist(), v), TypeError, "keys: expected a numpy.ndarray or a torch.Tensor, got list")
    expect(lambda: append(7, k, v), ValueError, "append: sequence 7 is not in the cache", "invalid_argument")
    expect(lambda: append([a, a], kk, vv), ValueError, f"append: sequence {a} is listed twice", "invalid_argument")
    expect(lambda: append("a", k, v), TypeError, "sequences: expected a sequence id .* got str")
    expect(lambda: append([a, 1.0], kk, vv), TypeError, r"sequences\[1\]: expected an int, got float")
    expect(lambda: cache.free_sequence(9), ValueError, "free_sequence: sequence 9 is not in the cache")
    assert cache.length(a) == cache.length(b) == 0


def test_bad_attends_name_the_argument(rng):
    cache = attnkit.KVCache(2, 8, 16, max_sequences=2)
    a, b = cache.add_sequence(), cache.add_sequence()
    cache.append([a, b], gaussian(rng, (2, 2, 3, 8)), gaussian(rng, (2, 2, 3, 8)))
    q = gaussian(rng, (2, 4, 1, 8))
    attend = attnkit.attend
    expect(lambda: attend(cache._core, [a, b], q), TypeError,
           "cache: expected an attnkit.KVCache, got attnkit._core.KVCache")
    expect(lambda: attend(cache, [a, b], q[0]), ValueError,
           r"query: expected \[B, Hq, n, d\] for 2 sequences, got shape \[4, 1, 8\]")
    expect(lambda: attend(cache, a, q), ValueError,
           r"query: expected \[Hq, n, d\] for one sequence, got shape \[2, 4, 1, 8\]")
    expect(lambda: attend(cache, [a], q), ValueError, "query: 2 batch entries, but sequences lists 1")
    expect(lambda: attend(cache, [a, b], q[..., :6]), ValueError,
           "query: width 6 does not match the cache's head_dim 8")
    expect(lambda: attend(cache, [a, b], q[:, :3]), ValueError,
           "query: 3 heads is not a multiple of the cache's 2 KV heads")
    expect(lambda: attend(cache, [a, 5], q), ValueError, "sequences: sequence 5 is not in the cache")
    expect(lambda: attend(cache, [a, a], q), ValueError, f"sequences: sequence {a} is listed twice", "invalid_argument")
    expect(lambda: attend(cache, [a, b], q.astype(np.int64)), TypeError, "query: dtype int64")
    expect(lambda: attend(cache, [a, b], q, alibi_slopes=[1, 2]), ValueError,
           r"alibi_slopes: expected 4 values \(one per query head\), got 2")
    expect(lambda: attend(cache, [a, b], q, scale=-1.0), ValueError,
           "scale: must be finite and > 0, got -1", "invalid_argument")
    expect(lambda: attend(cache, [a, b], q, window="wide"), TypeError, "window: expected")
    expect(lambda: attend(cache, np.array([0.0, 1.0]), q), TypeError, "sequences: expected a 1-D array of ints")


def test_the_gil_is_released_while_attend_runs(rng):
    Hkv, d, m = 8, 64, 1536
    cache = attnkit.KVCache(Hkv, d, m)
    s = cache.add_sequence()
    cache.append(s, gaussian(rng, (Hkv, m, d)), gaussian(rng, (Hkv, m, d)))
    q = gaussian(rng, (Hkv, m, d))
    expected = attnkit.attend(cache, s, q)
    results, spans, go = [None, None], [None, None], threading.Event()

    def worker(index):
        go.wait()
        start = time.perf_counter()
        results[index] = attnkit.attend(cache, s, q)
        spans[index] = (start, time.perf_counter())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    # This thread keeps running Python meanwhile; were the GIL held, it would stall for a whole call.
    ticks = [time.perf_counter()]
    go.set()
    while any(t.is_alive() for t in threads):
        ticks.append(time.perf_counter())
    for t in threads:
        t.join()
    for result in results:
        np.testing.assert_array_equal(result, expected)
    for start, end in spans:
        inside = [t for t in ticks if start < t < end]
        assert float(np.max(np.diff([start, *inside, end]))) < 0.5 * (end - start)


# ---- torch tensors -----------------------------------------------------------------------------


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_torch_tensors_in_and_out(torch, rng, layout, dtype):
    Hkv, Hq, d = 2, 8, 24
    tdtype = getattr(torch, dtype)
    cache = attnkit.KVCache(Hkv, d, 40, max_sequences=2, layout=layout, dtype=tdtype, **LAYOUTS[layout])
    assert cache.dtype == dtype
    shadow = Shadow(cache)
    a, b = shadow.add(), shadow.add()

    def tensor(shape, token_major=False):
        if token_major:  # [.., Hkv, t, d] stored as [.., t, Hkv, d]
            shape = shape[:-3] + (shape[-2], shape[-3], shape[-1])
            return torch.from_numpy(gaussian(rng, shape)).to(tdtype).transpose(-3, -2)
        return torch.from_numpy(gaussian(rng, shape)).to(tdtype)

    shadow.append(a, tensor((Hkv, 9, d), token_major=True), tensor((Hkv, 9, d)))
    shadow.append(b, tensor((Hkv, 4, d)), tensor((Hkv, 4, d), token_major=True))
    for t in (1, 2):
        shadow.append(torch.tensor([a, b]).tolist(), tensor((2, Hkv, t, d), token_major=True), tensor((2, Hkv, t, d)))
        q = tensor((2, Hq, t, d)).requires_grad_()  # read detached
        out, lse = attnkit.attend(cache, torch.tensor([b, a]), q, return_lse=True)
        assert isinstance(out, torch.Tensor) and out.dtype == tdtype and tuple(out.shape) == (2, Hq, t, d)
        assert isinstance(lse, torch.Tensor) and lse.dtype == torch.float32 and tuple(lse.shape) == (2, Hq, t)
        q64 = q.detach().double().numpy()
        for i, s in enumerate((b, a)):
            check_entry(out[i].double().numpy(), lse[i].numpy(), q64[i], shadow.keys[s], shadow.values[s], dtype,
                        f"torch {dtype} step {t}, sequence {s}")  # fmt: skip
    shadow.check_contents(f"torch {dtype}")
    # One sequence: rank-3 in, rank-3 out.
    assert tuple(attnkit.attend(cache, a, tensor((Hq, 1, d))).shape) == (Hq, 1, d)


def test_torch_and_numpy_do_not_mix(torch, rng):
    cache = attnkit.KVCache(1, 4, 8)
    s = cache.add_sequence()
    k = gaussian(rng, (1, 2, 4))
    expect(lambda: cache.append(s, k, torch.from_numpy(k)), TypeError,
           "values: expected a numpy.ndarray like keys, got torch.Tensor")
    expect(lambda: cache.append(s, torch.from_numpy(k), k), TypeError,
           "values: expected a torch.Tensor like keys, got numpy.ndarray")
    assert cache.length(s) == 0
