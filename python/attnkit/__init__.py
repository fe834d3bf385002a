"""attnkit: exact scaled dot-product attention for CPUs.

``attnkit.scaled_dot_product_attention`` takes numpy arrays or torch CPU tensors, with the
positional signature and meaning of ``torch.nn.functional.scaled_dot_product_attention`` plus
attnkit's extras (bottom-right causal alignment, sliding windows, ALiBi, soft-capping, key padding,
the log-sum-exp). torch is optional: it is imported by nobody here, only recognised when the caller
passes its tensors.
"""

import operator

from . import _core
from .functional import scaled_dot_product_attention

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


__all__ = ["scaled_dot_product_attention", "set_num_threads", "get_num_threads", "__version__"]
