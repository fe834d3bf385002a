"""attnkit.read_safetensors: the library's own .safetensors reader (C++, attnkit/safetensors.hpp)."""

from __future__ import annotations

import os

from . import _core


def read_safetensors(path, *, metadata=False):
    """The tensors of a .safetensors file, by name, as numpy arrays that own their memory.

    Read by attnkit's C++ reader, which trusts nothing in the file (a bad header, offsets, sizes or
    an unsupported dtype raise ``ValueError`` naming the file and the tensor; see docs/python.md). Dtypes
    F64, F32, F16, BF16, I64, I32 and BOOL; numpy has no bfloat16, so BF16 comes back as float32,
    exactly. With ``metadata=True``, returns ``(tensors, metadata)``, the file's ``__metadata__``
    strings. The GIL is released while the file is read.
    """
    tensors, meta = _core.read_safetensors(os.fspath(path))
    return (tensors, meta) if metadata else tensors
