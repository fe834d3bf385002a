"""attnkit: exact scaled dot-product attention for CPUs.

``attnkit.scaled_dot_product_attention`` takes numpy arrays or torch CPU tensors, with the
positional signature and meaning of ``torch.nn.functional.scaled_dot_product_attention`` plus
attnkit's extras (bottom-right causal alignment, sliding windows, ALiBi, soft-capping, key padding,
the log-sum-exp); with torch tensors that require grad, ``backward()`` runs attnkit's backward
kernel. ``attnkit.varlen_attention`` takes packed variable-length batches (FlashAttention's varlen
API). ``attnkit.KVCache`` and ``attnkit.attend`` are the decoding API, ``attnkit.nn`` holds
``MultiheadAttention`` (a drop-in for torch's), ``python -m attnkit.bench`` times attnkit against
torch. ``attnkit.read_safetensors`` reads .safetensors files with attnkit's own reader.
``attnkit.integrations.transformers`` makes attnkit an attention implementation of Hugging Face
transformers, and ``python -m attnkit.heads`` draws every head of such a model on a text.

torch is optional: importing attnkit never imports it. ``attnkit.torch`` and ``attnkit.nn`` do,
when first used.
"""

import operator

from . import _core
from .files import read_safetensors
from .functional import scaled_dot_product_attention
from .kv_cache import KVCache, attend
from .varlen import varlen_attention

__version__ = _core.version()


def set_num_threads(n: int) -> None:
    """Sets the threads attnkit's kernels use; ``n <= 0`` restores the default.

    The default is the environment variable ``ATTNKIT_NUM_THREADS`` when set, else every core.
    Results are bitwise identical for any thread count. The setting is process-wide and separate
    from torch's and numpy's own thread settings.
    """
    _core.set_num_threads(operator.index(n))


def get_num_threads() -> int:
    """The number of threads attnkit's kernels use now."""
    return _core.get_num_threads()


def set_memory_limit(nbytes: int) -> None:
    """Caps the memory one request may take (a tensor, a kernel's scratch, a cache's pools).

    Requests above it raise ``MemoryError`` before anything is allocated. ``0`` restores the
    default: what the system can give now (available RAM and swap, within cgroup and address-space
    limits).
    """
    nbytes = operator.index(nbytes)
    if nbytes < 0:
        raise ValueError(f"set_memory_limit: nbytes must be >= 0, got {nbytes}")
    _core.set_memory_limit(nbytes)


def available_memory() -> int:
    """Bytes one request may take now: the limit set by ``set_memory_limit``, else the system's."""
    return _core.available_memory()


__all__ = ["scaled_dot_product_attention", "varlen_attention", "KVCache", "attend", "read_safetensors", "set_num_threads",
           "get_num_threads", "set_memory_limit", "available_memory", "__version__"]


def __getattr__(name):
    # attnkit.torch and attnkit.nn import torch, so they load on first use, not with attnkit.
    if name in ("torch", "nn"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'attnkit' has no attribute {name!r}")
