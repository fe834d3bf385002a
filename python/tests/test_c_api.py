"""The C API (include/attnkit/attnkit.h) called directly through ctypes, as a program in another
language would: the structs declared here from the header, libattnkit_c.so from the C++ build
(ATTNKIT_C_LIBRARY, default build/lib/libattnkit_c.so), results against a numpy float64 oracle.
Without the library it skips, saying why, unless ATTNKIT_TEST_C_API=1 (CI) requires it."""

from __future__ import annotations

import ctypes as C
import os
from pathlib import Path

import numpy as np
import pytest

DEFAULT = Path(__file__).resolve().parents[2] / "build" / "lib" / "libattnkit_c.so"
PATH = Path(os.environ.get("ATTNKIT_C_LIBRARY", DEFAULT))

OK, INVALID_ARGUMENT, INVALID_SHAPE, NULL_POINTER, CAPACITY_EXCEEDED = 0, 1, 2, 4, 11
F64, F32, BOOL, I64 = 0, 1, 4, 6
CAUSAL_NONE, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT = 0, 1, 2
KERNEL_AUTOMATIC, KERNEL_REFERENCE = 0, 1


class Tensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int32), ("rank", C.c_int32), ("shape", C.c_int64 * 4),
                ("strides", C.c_int64 * 4)]  # fmt: skip


class Options(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("scale", C.c_double), ("causal", C.c_int32), ("kernel", C.c_int32),
                ("window_left", C.c_int64), ("window_right", C.c_int64), ("mask", C.POINTER(Tensor)),
                ("key_lengths", C.POINTER(C.c_int64)), ("key_lengths_count", C.c_int64),
                ("alibi_slopes", C.POINTER(C.c_float)), ("alibi_slopes_count", C.c_int64), ("softcap", C.c_double),
                ("dropout_p", C.c_double), ("seed", C.c_uint64), ("sinks", C.POINTER(C.c_float)),
                ("sinks_count", C.c_int64)]  # fmt: skip


class CacheConfig(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("num_kv_heads", C.c_int64), ("head_dim", C.c_int64),
                ("value_dim", C.c_int64), ("max_sequences", C.c_int64), ("max_sequence_length", C.c_int64),
                ("layout", C.c_int32), ("dtype", C.c_int32), ("block_size", C.c_int64), ("num_blocks", C.c_int64),
                ("key_dtype", C.c_int32), ("value_dtype", C.c_int32), ("key_quantization", C.c_int32)]  # fmt: skip


@pytest.fixture(scope="module")
def lib():
    if not PATH.is_file():
        why = f"no C library at {PATH} (build the C++ project first, or set ATTNKIT_C_LIBRARY)"
        if os.environ.get("ATTNKIT_TEST_C_API") == "1":
            pytest.fail(f"{why}; ATTNKIT_TEST_C_API=1 requires it", pytrace=False)
        pytest.skip(why)
    lib = C.CDLL(str(PATH))
    T = C.POINTER(Tensor)
    lib.attnkit_forward.argtypes = [T, T, T, T, C.POINTER(Options), T, T]
    lib.attnkit_backward.argtypes = [T, T, T, T, T, T, T, T, T, C.POINTER(Options)]
    lib.attnkit_options_init.argtypes = [C.POINTER(Options)]
    lib.attnkit_last_error_message.restype = C.c_char_p
    lib.attnkit_status_name.restype = C.c_char_p
    lib.attnkit_version.restype = C.c_char_p
    lib.attnkit_kv_cache_config_init.argtypes = [C.POINTER(CacheConfig)]
    lib.attnkit_kv_cache_create.argtypes = [C.POINTER(CacheConfig), C.POINTER(C.c_void_p)]
    lib.attnkit_kv_cache_destroy.argtypes = [C.c_void_p]
    lib.attnkit_kv_cache_add_sequence.argtypes = [C.c_void_p, C.POINTER(C.c_int64)]
    lib.attnkit_kv_cache_append.argtypes = [C.c_void_p, C.POINTER(C.c_int64), C.c_int64, T, T]
    lib.attnkit_kv_cache_attend.argtypes = [C.c_void_p, C.POINTER(C.c_int64), C.c_int64, T, T, C.c_void_p, T]
    return lib


def describe(array):
    """A descriptor of a numpy array, strides in elements (any layout numpy has)."""
    dtype = {np.dtype(np.float64): F64, np.dtype(np.float32): F32, np.dtype(np.bool_): BOOL}[array.dtype]
    t = Tensor()
    t.data = array.ctypes.data
    t.dtype = dtype
    t.rank = array.ndim
    for d in range(array.ndim):
        t.shape[d] = array.shape[d]
        t.strides[d] = array.strides[d] // array.itemsize
    return t


def ref(x):
    return C.byref(x) if x is not None else None


def oracle(q, k, v, scale=None, causal=CAUSAL_NONE, window=(-1, -1), mask=None, key_lengths=None, alibi=None,
           softcap=0.0):  # fmt: skip
    """softmax(logits) · V in float64, the logits built in docs/semantics.md's order."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    B, H, n, d = q.shape
    group = H // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    m = k.shape[2]
    s = q @ k.swapaxes(-1, -2) * (1 / np.sqrt(d) if scale is None else scale)
    if softcap:
        s = softcap * np.tanh(s / softcap)
    i = np.arange(n)[:, None] + (m - n if causal == CAUSAL_BOTTOM_RIGHT else 0)
    j = np.arange(m)[None, :]
    if alibi is not None:
        s = s - np.asarray(alibi, np.float64)[None, :, None, None] * np.abs(i - j)
    visible = np.ones((B, H, n, m), bool)
    if mask is not None:
        visible &= np.broadcast_to(mask, (B, H, n, m))
    if causal != CAUSAL_NONE:
        visible &= j <= i
    if window[0] >= 0:
        visible &= j >= i - window[0]
    if window[1] >= 0:
        visible &= j <= i + window[1]
    if key_lengths is not None:
        visible &= j[None, None] < np.asarray(key_lengths)[:, None, None, None]
    s = np.where(visible, s, -np.inf)
    top = s.max(-1, keepdims=True)
    p = np.where(visible, np.exp(s - np.where(np.isfinite(top), top, 0)), 0.0)
    total = p.sum(-1, keepdims=True)
    p = np.divide(p, total, out=np.zeros_like(p), where=total > 0)
    return p @ v, p


def test_options_struct_matches_the_header(lib):
    o = Options()
    lib.attnkit_options_init(C.byref(o))
    assert o.struct_size == C.sizeof(Options) == 120
    assert (o.window_left, o.window_right, o.causal, o.kernel, o.scale) == (-1, -1, CAUSAL_NONE, KERNEL_AUTOMATIC, 0)
    config = CacheConfig()
    lib.attnkit_kv_cache_config_init(C.byref(config))
    assert config.struct_size == C.sizeof(CacheConfig) == 88 and config.block_size == 16 and config.key_dtype == -1
    assert config.key_quantization == 0  # ATTNKIT_KEYS_PER_TOKEN
    assert lib.attnkit_version().decode().count(".") == 2


@pytest.mark.parametrize("dtype,kernel,tolerance", [(np.float64, KERNEL_REFERENCE, 1e-12), (np.float32, KERNEL_AUTOMATIC, 2e-6)])
def test_forward_against_the_numpy_oracle(lib, rng, dtype, kernel, tolerance):
    B, Hq, Hkv, n, m, d, dv = 2, 6, 2, 9, 13, 24, 10
    q = rng.standard_normal((B, Hq, n, d)).astype(dtype)
    k = rng.standard_normal((B, Hkv, m, d)).astype(dtype)
    v = rng.standard_normal((B, Hkv, m, dv)).astype(dtype)
    cases = [
        {},
        {"causal": CAUSAL_TOP_LEFT},
        {"causal": CAUSAL_BOTTOM_RIGHT, "window": (4, 0), "softcap": 3.0, "scale": 0.4},
        {"mask": rng.random((1, Hq, n, m)) < 0.7, "key_lengths": [13, 6], "alibi": np.linspace(0.1, 0.6, Hq)},
    ]
    for case in cases:
        o = Options()
        lib.attnkit_options_init(C.byref(o))
        o.kernel = kernel
        keep = []  # what the pointers in o refer to, alive for the call
        o.causal = case.get("causal", CAUSAL_NONE)
        o.window_left, o.window_right = case.get("window", (-1, -1))
        o.softcap = case.get("softcap", 0.0)
        o.scale = case.get("scale", 0.0)
        if "mask" in case:
            mask = case["mask"]
            keep.append(describe(mask))
            o.mask = C.pointer(keep[-1])
        if "key_lengths" in case:
            lengths = (C.c_int64 * B)(*case["key_lengths"])
            keep.append(lengths)
            o.key_lengths, o.key_lengths_count = lengths, B
        if "alibi" in case:
            slopes = (C.c_float * Hq)(*case["alibi"])
            keep.append(slopes)
            o.alibi_slopes, o.alibi_slopes_count = slopes, Hq
            case = {**case, "alibi": np.array(slopes[:], np.float64)}  # the float32 slopes attnkit sees
        out = np.full((B, Hq, n, dv), np.nan, dtype)
        lse = np.full((B, Hq, n), np.nan, np.float32)
        status = lib.attnkit_forward(C.byref(describe(q)), C.byref(describe(k)), C.byref(describe(v)),
                                     C.byref(describe(out)), C.byref(o), C.byref(describe(lse)), None)  # fmt: skip
        assert status == OK, lib.attnkit_last_error_message()
        want, _ = oracle(q, k, v, **case)
        scale = np.abs(want).max()
        assert np.abs(out - want).max() <= tolerance * scale, case.keys()


def test_backward_against_the_numpy_oracle(lib, rng):
    B, H, n, m, d = 1, 2, 7, 7, 8
    q, k, v, d_out = (rng.standard_normal((B, H, x, d)) for x in (n, m, m, n))
    o = Options()
    lib.attnkit_options_init(C.byref(o))
    o.causal = CAUSAL_TOP_LEFT
    out, lse = np.empty((B, H, n, d)), np.empty((B, H, n), np.float32)
    assert lib.attnkit_forward(*(C.byref(describe(x)) for x in (q, k, v, out)), C.byref(o), C.byref(describe(lse)), None) == OK
    grads = [np.full_like(x, np.nan) for x in (q, k, v)]
    status = lib.attnkit_backward(*(C.byref(describe(x)) for x in (q, k, v, out, d_out, lse, *grads)), C.byref(o))
    assert status == OK, lib.attnkit_last_error_message()
    # Gradients of sum(out * d_out) through softmax: dV = Pᵀ dO, dS = P ∘ (dO Vᵀ − rowsum(dO ∘ O)).
    _, p = oracle(q, k, v, causal=CAUSAL_TOP_LEFT)
    dp = d_out @ v.swapaxes(-1, -2)
    ds = p * (dp - (d_out * out).sum(-1, keepdims=True))
    scale = 1 / np.sqrt(d)
    for got, want in zip(grads, (ds @ k * scale, ds.swapaxes(-1, -2) @ q * scale, p.swapaxes(-1, -2) @ d_out)):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_an_error_names_the_argument_and_writes_nothing(lib, rng):
    q = rng.standard_normal((2, 2, 4, 8)).astype(np.float32)
    k = rng.standard_normal((3, 2, 4, 8)).astype(np.float32)  # batch 3 for q's 2
    out = np.full((2, 2, 4, 8), np.nan, np.float32)
    status = lib.attnkit_forward(*(C.byref(describe(x)) for x in (q, k, k, out)), None, None, None)
    assert status == INVALID_SHAPE
    assert lib.attnkit_status_name(status) == b"invalid_shape"
    assert b"k, v: batch sizes 3 and 3 must equal q's batch size 2" in lib.attnkit_last_error_message()
    assert np.isnan(out).all()
    assert lib.attnkit_forward(None, None, None, None, None, None, None) == NULL_POINTER
    assert lib.attnkit_last_error_message() == b"q: the tensor descriptor is NULL"


def test_kv_cache_decoding_against_the_oracle(lib, rng):
    Hkv, Hq, d = 2, 4, 16
    config = CacheConfig()
    lib.attnkit_kv_cache_config_init(C.byref(config))
    config.num_kv_heads, config.head_dim, config.max_sequence_length = Hkv, d, 32
    cache = C.c_void_p()
    assert lib.attnkit_kv_cache_create(C.byref(config), C.byref(cache)) == OK, lib.attnkit_last_error_message()
    try:
        seq = C.c_int64()
        assert lib.attnkit_kv_cache_add_sequence(cache, C.byref(seq)) == OK
        keys, values = rng.standard_normal((Hkv, 20, d)), rng.standard_normal((Hkv, 20, d))
        assert lib.attnkit_kv_cache_append(cache, C.byref(seq), 1, C.byref(describe(keys)), C.byref(describe(values))) == OK
        q = rng.standard_normal((1, Hq, 3, d))
        out = np.full((1, Hq, 3, d), np.nan)
        status = lib.attnkit_kv_cache_attend(cache, C.byref(seq), 1, C.byref(describe(q)), C.byref(describe(out)), None, None)
        assert status == OK, lib.attnkit_last_error_message()
        # The cache stores float32; the queries are its last 3 tokens, aligned bottom-right.
        stored_k, stored_v = (x.astype(np.float32)[None] for x in (keys, values))
        want, _ = oracle(q, stored_k, stored_v, causal=CAUSAL_BOTTOM_RIGHT)
        np.testing.assert_allclose(out, want, rtol=1e-9, atol=1e-12)
        too_many = rng.standard_normal((Hkv, 13, d))
        assert lib.attnkit_kv_cache_append(cache, C.byref(seq), 1, C.byref(describe(too_many)),
                                           C.byref(describe(too_many))) == CAPACITY_EXCEEDED  # fmt: skip
    finally:
        lib.attnkit_kv_cache_destroy(cache)
