"""The memory budget from Python: a request larger than the limit (or than the machine) raises
MemoryError naming what needed how much, before anything is allocated."""

import numpy as np
import pytest

import attnkit

MiB = 1 << 20


@pytest.fixture
def limit_128_mib():
    attnkit.set_memory_limit(128 * MiB)
    yield
    attnkit.set_memory_limit(0)


def test_the_limit_replaces_the_system_figure_and_zero_restores_it(limit_128_mib):
    assert attnkit.available_memory() == 128 * MiB
    attnkit.set_memory_limit(0)
    assert attnkit.available_memory() != 128 * MiB
    assert attnkit.available_memory() > 64 * MiB
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        attnkit.set_memory_limit(-1)


def test_reference_scratch_over_the_limit_raises_memory_error(limit_128_mib):
    # float64 runs the reference, which holds n×m logits: 3 · 4096² doubles = 384 MiB.
    q = np.ones((1, 1, 4096, 1))
    with pytest.raises(MemoryError, match=r"its scratch memory needs 384\.\d\d MiB") as caught:
        attnkit.scaled_dot_product_attention(q, q, q)
    assert caught.value.code == "out_of_memory"
    attnkit.set_memory_limit(0)
    q = np.ones((1, 1, 256, 1))
    assert attnkit.scaled_dot_product_attention(q, q, q).shape == (1, 1, 256, 1)


def test_a_kv_cache_over_the_limit_raises_memory_error(limit_128_mib):
    with pytest.raises(MemoryError, match="KVCache of 4 blocks"):
        attnkit.KVCache(8, 128, 8192, max_sequences=4)  # 2 pools of 128 MiB
    attnkit.KVCache(8, 128, 1024, max_sequences=4)  # 2 pools of 16 MiB fit


def test_sizes_beyond_the_machine_raise_without_a_limit():
    # Broadcast views make absurd sizes cheap: one element standing for 2^40 keys.
    q = np.ones((1, 1, 1, 1), dtype=np.float32)
    k = np.broadcast_to(np.ones((1, 1, 1, 1), dtype=np.float32), (1, 1, 1 << 40, 1))
    with pytest.raises(MemoryError, match="scratch memory needs"):
        attnkit.scaled_dot_product_attention(q, k, k)
