"""Shared by the Python tests: one random seed per session, fresh unless ATTNKIT_TEST_SEED replays
it, and a generator per test derived from it and the test's name (so a test's inputs do not depend on
which other tests ran)."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

SESSION_SEED = int(os.environ.get("ATTNKIT_TEST_SEED", np.random.SeedSequence().entropy % 2**32))


def test_seed(request):
    """This test's seed, printed with the session's so that a failure can be replayed."""
    seed = (SESSION_SEED + zlib.crc32(request.node.name.encode())) % 2**32
    print(f"replay with ATTNKIT_TEST_SEED={SESSION_SEED} (this test's generator seed: {seed})")
    return seed


test_seed.__test__ = False  # a helper, not a test


@pytest.fixture
def rng(request):
    return np.random.default_rng(test_seed(request))
