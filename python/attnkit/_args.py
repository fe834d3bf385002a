"""The argument helpers shared by attnkit's Python front ends (functional, varlen, kv_cache):
the two kinds of arrays (numpy and torch) and the checks that turn each argument into what
attnkit._core takes, with errors that name the argument."""

from __future__ import annotations

import operator
import os
import sys

import numpy as np


# ---- the two kinds of arrays: numpy and torch --------------------------------------------------


class _Numpy:
    """numpy arrays: float16, float32, float64 (numpy has no bfloat16)."""

    name = "numpy.ndarray"
    float_dtypes = ("float16", "float32", "float64")

    @staticmethod
    def owns(x):
        return isinstance(x, np.ndarray)

    @staticmethod
    def dtype_name(x):
        return x.dtype.name

    @staticmethod
    def is_bool(x):
        return x.dtype == np.bool_

    @staticmethod
    def prepare(x, name):
        # The kernels read native-endian elements; a byte-swapped array is converted (a copy).
        if x.dtype.byteorder not in ("=", "|"):
            x = x.astype(x.dtype.newbyteorder("="))
        return x

    @staticmethod
    def broadcast_to(x, shape):
        return x if tuple(x.shape) == tuple(shape) else np.broadcast_to(x, shape)

    @staticmethod
    def reshape(x, shape):
        return x.reshape(shape)  # a view when the strides allow it, else a copy

    @staticmethod
    def empty(shape, like):
        return np.empty(shape, dtype=like.dtype)

    @staticmethod
    def empty_float32(shape, like):
        return np.empty(shape, dtype=np.float32)


class _Torch:
    """torch CPU tensors: float16, bfloat16, float32, float64."""

    name = "torch.Tensor"
    float_dtypes = ("float16", "bfloat16", "float32", "float64")

    def __init__(self, torch):
        self.torch = torch

    def owns(self, x):
        return isinstance(x, self.torch.Tensor)

    @staticmethod
    def dtype_name(x):
        return str(x.dtype).removeprefix("torch.")

    def is_bool(self, x):
        return x.dtype == self.torch.bool

    def prepare(self, x, name):
        if x.device.type != "cpu":
            raise ValueError(f"{name}: attnkit runs on the CPU; got a tensor on {x.device}")
        if x.layout != self.torch.strided:
            raise TypeError(f"{name}: expected a dense (strided) tensor, got layout {x.layout}")
        # The kernels read values only; gradients are attnkit.torch's autograd Function's business.
        return x.detach().resolve_neg()

    @staticmethod
    def broadcast_to(x, shape):
        return x if tuple(x.shape) == tuple(shape) else x.expand(shape)

    @staticmethod
    def reshape(x, shape):
        return x.reshape(shape)  # a view when the strides allow it, else a copy

    def empty(self, shape, like):
        return self.torch.empty(shape, dtype=like.dtype)

    def empty_float32(self, shape, like):
        return self.torch.empty(shape, dtype=self.torch.float32)


_NUMPY = _Numpy()
_TORCH = None  # made on the first torch tensor seen


def _kind_of(x):
    """The kind (numpy or torch) of an array, or None. torch is never imported here: a torch
    tensor can only exist when the caller has imported torch already."""
    global _TORCH
    if isinstance(x, np.ndarray):
        return _NUMPY
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        if _TORCH is None or _TORCH.torch is not torch:
            _TORCH = _Torch(torch)
        return _TORCH
    return None


def _type_name(x):
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


# ---- options -----------------------------------------------------------------------------------


def _window(window):
    if window is None:
        return -1, -1
    try:
        left, right = window
    except (TypeError, ValueError):
        raise TypeError(f"window: expected (left, right), got {window!r}") from None

    def side(x):
        if x is None:
            return -1
        try:
            return operator.index(x)
        except TypeError:
            raise TypeError(f"window: sides are ints (or None for unbounded), got {window!r}") from None

    return side(left), side(right)


def _numbers(values, name, count, kind_name, to_numpy):
    """A 1-D list of numbers from a sequence, numpy array or torch tensor."""
    if values is None:
        return []
    array = to_numpy(values)
    if array.ndim > 1 and array.size != count:
        raise ValueError(f"{name}: expected {count} values ({kind_name}), got shape {list(array.shape)}")
    array = array.reshape(-1)
    if array.size != count:
        raise ValueError(f"{name}: expected {count} values ({kind_name}), got {array.size}")
    return array


def _to_numpy(values):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(values, torch.Tensor):
        values = values.detach().cpu()
        if values.is_floating_point():
            values = values.double()
        return values.numpy()
    return np.asarray(values)


def _per_query_head(values, name, heads, kind_name):
    """A list of real numbers, one per query head (or none)."""
    array = _numbers(values, name, heads, kind_name, _to_numpy)
    if len(array) and array.dtype.kind not in "fiu":
        raise TypeError(f"{name}: expected real numbers, got dtype {array.dtype}")
    return [float(x) for x in array]


def _alibi_slopes(alibi_slopes, heads):
    return _per_query_head(alibi_slopes, "alibi_slopes", heads, "one per query head")


def _sinks(sinks, heads):
    """Attention sinks: one logit per query head (the library checks they are finite)."""
    return _per_query_head(sinks, "sinks", heads, "one logit per query head")


def _key_lengths(key_lengths, batch):
    array = _numbers(key_lengths, "key_lengths", batch, "one per batch entry", _to_numpy)
    if len(array) and array.dtype.kind not in "iu":
        raise TypeError(f"key_lengths: expected integers, got dtype {array.dtype}")
    return [int(x) for x in array]


def _seed(seed, dropout_p):
    if seed is None:
        # Only drawn when dropout is on, so calls without dropout never touch the system's entropy.
        return int.from_bytes(os.urandom(8), "little") if dropout_p > 0 else 0
    try:
        seed = operator.index(seed)
    except TypeError:
        raise TypeError(f"seed: expected an int in [0, 2**64), got {seed!r}") from None
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed: expected an int in [0, 2**64), got {seed}")
    return seed


def _float_or_none(x, name):
    return None if x is None else _float(x, name)


def _float(x, name):
    try:
        return float(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a float, got {x!r}") from None


# ---- arrays ------------------------------------------------------------------------------------


def _float_arrays(args, *, one_dtype=False):
    """The arrays of `args` ({name: array}), all of the first one's kind (numpy or torch) and
    floating (with one_dtype, all of the first one's dtype), prepared for the kernels; returns
    (kind, arrays)."""
    names = list(args)
    lead = names[0]
    kind = _kind_of(args[lead])
    if kind is None:
        raise TypeError(f"{lead}: expected a numpy.ndarray or a torch.Tensor, got {_type_name(args[lead])}")
    prepared = []
    for name, x in args.items():
        if not kind.owns(x):
            raise TypeError(f"{name}: expected a {kind.name} like {lead}, got {_type_name(x)}")
        dtype = kind.dtype_name(x)
        if dtype not in kind.float_dtypes:
            raise TypeError(f"{name}: dtype {dtype} is not supported; attnkit takes {', '.join(kind.float_dtypes)}")
        if one_dtype and name != lead and dtype != kind.dtype_name(args[lead]):
            raise TypeError(
                f"{name}: dtype {dtype} differs from {lead}'s {kind.dtype_name(args[lead])} "
                f"({', '.join(names[:-1])} and {names[-1]} share one dtype)"
            )
        prepared.append(kind.prepare(x, name))
    return kind, prepared
