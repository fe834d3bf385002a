"""attnkit.kv_cache: a key/value cache for generation loops, and attention over it.

A decoder that generates token by token keeps the keys and values of every earlier token, so that
each step appends one row per KV head and attends over the cache instead of recomputing it. The
arguments are checked and named here; the cache itself, its appends and ``attend`` are C++
(``attnkit._core``), run with the GIL released.
"""

from __future__ import annotations

import operator
import sys

import numpy as np

from . import _core
from ._args import _alibi_slopes, _float_arrays, _float_or_none, _sinks, _type_name, _window

__all__ = ["KVCache", "attend"]

_STORAGE_DTYPES = ("float32", "float16", "bfloat16")
_QUANTIZED_DTYPES = ("int8", "int4", "fp8_e4m3", "fp8_e5m2")  # block-quantized storage, named by string only


def _int(x, name):
    if isinstance(x, bool):  # an int to Python, but never meant as a size or an id
        raise TypeError(f"{name}: expected an int, got {x!r}")
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {_type_name(x)}") from None


def _storage_dtype(dtype, what="dtype"):
    """"float32", "float16" or "bfloat16" from a name, a numpy dtype or a torch dtype; or the
    strings "int8", "int4", "fp8_e4m3" and "fp8_e5m2" (block-quantized storage, a scale per block of
    32 features: a numpy or torch int8 or float8 is not that)."""
    torch = sys.modules.get("torch")
    if isinstance(dtype, str):
        if dtype in _QUANTIZED_DTYPES:
            return dtype
        name = dtype
    elif torch is not None and isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"{what}: expected a dtype name, numpy dtype or torch dtype, got {dtype!r}") from None
    if name not in _STORAGE_DTYPES:
        raise TypeError(
            f"{what}: the cache stores {', '.join(_STORAGE_DTYPES)} (or, quantized, the strings "
            f'"int8", "int4", "fp8_e4m3" and "fp8_e5m2"); got {name}'
        )
    return name


def _sequence_ids(sequences, name="sequences"):
    """(ids, single): one int, or a sequence (list, tuple, 1-D array or tensor) of ints."""
    if not isinstance(sequences, bool):
        try:
            return [operator.index(sequences)], True
        except TypeError:
            pass
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(sequences, torch.Tensor):
        sequences = sequences.detach().cpu().numpy()
    if isinstance(sequences, np.ndarray):
        if sequences.ndim != 1 or sequences.dtype.kind not in "iu":
            raise TypeError(
                f"{name}: expected a 1-D array of ints, got dtype {sequences.dtype}, shape {list(sequences.shape)}"
            )
        return [int(s) for s in sequences], False
    if not isinstance(sequences, (list, tuple)):
        raise TypeError(f"{name}: expected a sequence id (int) or a list of them, got {_type_name(sequences)}")
    return [_int(s, f"{name}[{i}]") for i, s in enumerate(sequences)], False


def _shape(x):
    return [int(d) for d in x.shape]


class KVCache:
    """Keys and values of many sequences, each with its own length, for decoding token by token.

    ``KVCache(num_kv_heads, head_dim, max_sequence_length, *, value_dim=None, max_sequences=1,
    layout="contiguous", block_size=None, num_blocks=None, dtype="float32")``

    Layouts:
        ``"contiguous"``: each sequence owns a slot of ``max_sequence_length`` rows, reserved when
            it is added: simple, but every sequence costs its full length.
        ``"paged"``: sequences take blocks of ``block_size`` tokens (a power of two; default 16)
            from one shared pool of ``num_blocks`` blocks as they grow, as in vLLM's
            PagedAttention, and a freed sequence's blocks return to the pool. The default pool
            holds every sequence at full length (the contiguous layout's memory); a smaller one
            lets many sequences that are rarely all long share the memory.
        Both decode at the same speed. All memory is allocated here, once: nothing is reallocated
        in the decode loop.

    ``dtype`` is the storage: ``"float32"``, ``"float16"`` or ``"bfloat16"`` (or the numpy/torch
    dtype). Appended keys and values, of any floating dtype, are rounded to it once. ``"int8"``,
    ``"int4"`` and the OCP 8-bit floats ``"fp8_e4m3"`` and ``"fp8_e5m2"`` store them block-quantized
    (blocks of 32 features with float16 scales; the widths must be multiples of 32): decoding then
    reads 1.9x (8 bits) or 3.2x (int4) fewer bytes than bfloat16, at the
    price of a quantisation error (docs/python.md lists it). ``key_dtype`` and ``value_dtype`` set the
    keys' and values' storage apart (e.g. int8 keys, int4 values); ``keys(seq)`` and ``values(seq)``
    of quantized storage give the stored values exactly, as float64. ``key_quantization=
    "per_channel"`` quantises int8 and int4 keys per feature over groups of 32 tokens (as KIVI does)
    rather than per token: keys with a few large channels, as real models' keys have, then keep the
    small channels' precision (a paged cache's ``block_size``, 32 by default then, must be a
    multiple of 32).

    When full, an append (or ``add_sequence``) raises ``ValueError`` with
    ``.code == "capacity_exceeded"`` and leaves the cache exactly as it was: a batched append
    either grows every listed sequence or none. ``room(seq)`` says how much more fits.

    Sequences are ints handed out by ``add_sequence``; ``seq in cache`` tells whether one is alive.
    The cache may be used from several Python threads: appends run one at a time, and attention
    over the cache waits for them.
    """

    def __init__(
        self,
        num_kv_heads,
        head_dim,
        max_sequence_length,
        *,
        value_dim=None,
        max_sequences=1,
        layout="contiguous",
        block_size=None,
        num_blocks=None,
        dtype="float32",
        key_dtype=None,
        value_dtype=None,
        key_quantization="per_token",
    ):
        if layout not in ("contiguous", "paged"):
            raise ValueError(f'layout: expected "contiguous" or "paged", got {layout!r}')
        if layout == "contiguous":
            # Silently ignoring them would hide a forgotten layout="paged".
            for name, x in (("block_size", block_size), ("num_blocks", num_blocks)):
                if x is not None:
                    raise ValueError(f'{name}: applies to layout="paged" only (this cache is contiguous)')
        if key_quantization not in ("per_token", "per_channel"):
            raise ValueError(f'key_quantization: expected "per_token" or "per_channel", got {key_quantization!r}')
        if num_blocks is not None and _int(num_blocks, "num_blocks") <= 0:
            raise ValueError(
                f"num_blocks: must be > 0 (None = enough for every sequence at full length), got {num_blocks}"
            )
        self._core = _core.KVCache(
            _int(num_kv_heads, "num_kv_heads"),
            _int(head_dim, "head_dim"),
            _int(max_sequence_length, "max_sequence_length"),
            value_dim=0 if value_dim is None else _int(value_dim, "value_dim"),
            max_sequences=_int(max_sequences, "max_sequences"),
            layout=layout,
            block_size=(32 if key_quantization == "per_channel" else 16)
            if block_size is None
            else _int(block_size, "block_size"),
            num_blocks=0 if num_blocks is None else _int(num_blocks, "num_blocks"),
            dtype=_storage_dtype(dtype),
            key_dtype=None if key_dtype is None else _storage_dtype(key_dtype, "key_dtype"),
            value_dtype=None if value_dtype is None else _storage_dtype(value_dtype, "value_dtype"),
            key_quantization=key_quantization,
        )

    # ---- the configuration (read-only) ----

    num_kv_heads = property(lambda self: self._core.num_kv_heads, doc="Key/value heads, Hkv.")
    head_dim = property(lambda self: self._core.head_dim, doc="Width of a key, d.")
    value_dim = property(lambda self: self._core.value_dim, doc="Width of a value, dv (head_dim unless given).")
    max_sequences = property(lambda self: self._core.max_sequences, doc="Sequences alive at once.")
    max_sequence_length = property(lambda self: self._core.max_sequence_length, doc="Tokens one sequence may hold.")
    layout = property(lambda self: self._core.layout, doc='"contiguous" or "paged".')
    dtype = property(
        lambda self: self._core.dtype,
        doc='Storage dtype: "float32", "float16", "bfloat16", "int8", "int4", "fp8_e4m3" or "fp8_e5m2".',
    )
    key_dtype = property(lambda self: self._core.key_dtype, doc="The keys' storage dtype (dtype unless given).")
    value_dtype = property(lambda self: self._core.value_dtype, doc="The values' storage dtype (dtype unless given).")
    key_quantization = property(
        lambda self: self._core.key_quantization, doc='How int8 and int4 keys are quantised: "per_token" or "per_channel".'
    )

    @property
    def block_size(self):
        """Paged: tokens per block. Contiguous: None."""
        return self._core.block_size if self.layout == "paged" else None

    @property
    def num_blocks(self):
        """Paged: blocks in the pool. Contiguous: None."""
        return self._core.num_blocks if self.layout == "paged" else None

    @property
    def free_blocks(self):
        """Paged: blocks no sequence holds. Contiguous: None."""
        return self._core.free_blocks() if self.layout == "paged" else None

    # ---- sequences ----

    def add_sequence(self):
        """A new, empty sequence's id. ``capacity_exceeded`` when ``max_sequences`` are alive."""
        return self._core.add_sequence()

    def free_sequence(self, sequence):
        """Forgets the sequence; its slot or blocks go to later sequences."""
        self._core.free_sequence(_int(sequence, "sequence"))

    def __contains__(self, sequence):
        try:
            return self._core.contains(operator.index(sequence))
        except TypeError:
            return False

    @property
    def sequences(self):
        """The ids of the alive sequences, oldest first (a new list)."""
        return list(self._core.sequences())

    def length(self, sequence):
        """Tokens the sequence holds."""
        return self._core.length(_int(sequence, "sequence"))

    def room(self, sequence):
        """Tokens the sequence can still take now: up to ``max_sequence_length``, and (paged)
        what its last block and the free blocks hold."""
        return self._core.room(_int(sequence, "sequence"))

    def __repr__(self):
        paged = f", block_size={self.block_size}, num_blocks={self.num_blocks}" if self.layout == "paged" else ""
        mixed = "".join(
            f", {name}={getattr(self, name)!r}" for name in ("key_dtype", "value_dtype") if getattr(self, name) != self.dtype
        )
        if self.key_quantization != "per_token":
            mixed += f", key_quantization={self.key_quantization!r}"
        return (
            f"attnkit.KVCache(num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
            f"value_dim={self.value_dim}, max_sequence_length={self.max_sequence_length}, "
            f"max_sequences={self.max_sequences}, layout={self.layout!r}{paged}, dtype={self.dtype!r}{mixed}, "
            f"sequences={self.sequences})"
        )

    # ---- rows ----

    def append(self, sequences, keys, values):
        """Appends t new tokens to each sequence.

        ``append(seq, keys [Hkv, t, d], values [Hkv, t, dv])`` for one sequence, or
        ``append([s0, s1, ...], keys [B, Hkv, t, d], values [B, Hkv, t, dv])`` for B sequences at
        once (entry b to sequence b; all grow by the same t). numpy arrays or torch CPU tensors
        (not mixed), any floating dtype and strides, read in place and rounded to the cache's
        dtype. All or nothing: on any error (``capacity_exceeded`` included) no sequence grows.
        """
        ids, single = _sequence_ids(sequences)
        kind, (keys, values) = _float_arrays({"keys": keys, "values": values})
        lead = [] if single else [len(ids)]
        checks = (("keys", keys, self.head_dim, "head_dim"), ("values", values, self.value_dim, "value_dim"))
        for name, x, width, what in checks:
            if x.ndim != len(lead) + 3 or _shape(x)[:-2] != lead + [self.num_kv_heads] or x.shape[-1] != width:
                form = "[Hkv, t, d]" if single else "[B, Hkv, t, d]"
                expected = ", ".join(str(e) for e in lead + [self.num_kv_heads, "t", width])
                raise ValueError(
                    f"{name}: expected {form} = [{expected}] ({'' if single else 'one entry per sequence, '}"
                    f"the cache's KV heads, new tokens, its {what}), got {_shape(x)}"
                )
        shapes = f"(keys {_shape(keys)}, values {_shape(values)})"
        if keys.shape[-2] != values.shape[-2]:
            raise ValueError(f"values: {values.shape[-2]} new tokens, but keys has {keys.shape[-2]} {shapes}")
        if single:
            keys, values = (kind.reshape(x, (1,) + tuple(x.shape)) for x in (keys, values))
        self._core.append(ids, keys, values)

    def keys(self, sequence):
        """A copy of the sequence's cached keys, a numpy array [Hkv, length, d] in the storage
        dtype; bfloat16 storage comes back as float32 (exact: numpy has no bfloat16)."""
        return self._core.keys(_int(sequence, "sequence"))

    def values(self, sequence):
        """A copy of the sequence's cached values, [Hkv, length, dv], as ``keys`` does."""
        return self._core.values(_int(sequence, "sequence"))


def attend(cache, sequences, query, *, scale=None, window=None, alibi_slopes=None, softcap=None, sinks=None,
           return_lse=False):
    """Attention of each sequence's newest queries over its cached keys and values.

    ``attend(cache, [s0, s1, ...], query [B, Hq, n, d])`` → ``[B, Hq, n, dv]``, entry b attending
    over sequence ``sequences[b]``; ``attend(cache, seq, query [Hq, n, d])`` → ``[Hq, n, dv]`` for
    one sequence. Takes a numpy array or a torch CPU tensor of any strides and returns a new one of
    the same kind and dtype: float32, float16 and bfloat16 run the fast kernel, reading the cache
    in place (any storage dtype); float64 runs the float64 reference kernel on a gathered copy.

    Alignment: the queries are the sequence's last n tokens, already appended. Each sequence is
    aligned bottom-right with its own length m: query i sits at position p = m − n + i and sees
    the cached keys j ≤ p, so entries of different lengths share one call. This is
    ``scaled_dot_product_attention(query, K, V, is_causal=True, causal_alignment="bottom_right",
    enable_gqa=True)`` on each sequence's full keys K and values V. A query with p < 0 (a sequence
    shorter than n) sees no key and gives zeros (lse −inf).

    Hq must be a multiple of the cache's KV heads (grouped-query attention: query head h reads KV
    head ``h // (Hq // Hkv)``). A sequence may appear once per call.

    Args:
        scale: the factor on ``query·keyᵀ``; default ``1/sqrt(d)``.
        window: ``(left, right)``: keys ``p − left ≤ j ≤ p + right`` stay visible (a side of -1 or
            None is unbounded; j ≤ p holds anyway).
        alibi_slopes: one float per query head: subtracts ``slope_h·(p − j)`` from the scores.
        softcap: ``softcap·tanh(s/softcap)`` on the scaled scores; None or 0 is off.
        sinks: learned attention sinks, one logit per query head (gpt-oss's ``s_aux``): each joins
            its head's softmax denominator and weights no value. Used as float32.
        return_lse: also return the log-sum-exp of each row's scores, float32 ``[B, Hq, n]``
            (``[Hq, n]`` for one sequence): returns ``(output, lse)``.

    Raises TypeError or ValueError naming the argument; the library's errors carry ``.code``.
    The GIL is released while the kernel runs.
    """
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache: expected an attnkit.KVCache, got {_type_name(cache)}")
    ids, single = _sequence_ids(sequences)
    kind, (query,) = _float_arrays({"query": query})
    rank, form = (3, "[Hq, n, d]") if single else (4, "[B, Hq, n, d]")
    if query.ndim != rank:
        one = "one sequence" if single else f"{len(ids)} sequences"
        raise ValueError(f"query: expected {form} for {one}, got shape {_shape(query)}")
    if single:
        query = kind.reshape(query, (1,) + tuple(query.shape))
    B, Hq, n, d = (int(x) for x in query.shape)
    if B != len(ids):
        raise ValueError(f"query: {B} batch entries, but sequences lists {len(ids)} (one entry per sequence)")
    if d != cache.head_dim:
        raise ValueError(
            f"query: width {d} does not match the cache's head_dim {cache.head_dim} (query {_shape(query)})"
        )
    if Hq % cache.num_kv_heads != 0:
        raise ValueError(
            f"query: {Hq} heads is not a multiple of the cache's {cache.num_kv_heads} KV heads (query {_shape(query)})"
        )
    for s in ids:
        if s not in cache:
            raise ValueError(f"sequences: sequence {s} is not in the cache")

    window_left, window_right = _window(window)
    alibi = _alibi_slopes(alibi_slopes, Hq)
    out = kind.empty((B, Hq, n, cache.value_dim), like=query)
    lse = kind.empty_float32((B, Hq, n), like=query) if return_lse else None
    _core.attend(
        cache._core, ids, query, out,
        lse=lse, scale=_float_or_none(scale, "scale"), window_left=window_left, window_right=window_right,
        alibi_slopes=alibi, softcap=_float_or_none(softcap, "softcap") or 0.0, sinks=_sinks(sinks, Hq),
    )  # fmt: skip
    if single:
        out, lse = out[0], None if lse is None else lse[0]
    return (out, lse) if return_lse else out
