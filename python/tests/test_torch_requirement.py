"""The cross-checks against torch skip without it, saying why, except where ATTNKIT_TEST_TORCH=1 (CI)
requires torch: there a torch that fails to import fails them (conftest.import_torch)."""

from __future__ import annotations

import sys

import pytest

import conftest


def test_missing_torch_skips_saying_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    monkeypatch.setattr(conftest, "TORCH_REQUIRED", False)
    with pytest.raises(pytest.skip.Exception, match="torch failed to import"):
        conftest.import_torch()


def test_missing_torch_fails_when_required(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(conftest, "TORCH_REQUIRED", True)
    with pytest.raises(pytest.fail.Exception, match="ATTNKIT_TEST_TORCH=1 requires it"):
        conftest.import_torch()


def test_missing_transformers_skips_or_fails_as_asked(monkeypatch):
    """The same for transformers (conftest.import_transformers, ATTNKIT_TEST_TRANSFORMERS=1)."""
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.setattr(conftest, "TORCH_REQUIRED", False)
    monkeypatch.setattr(conftest, "import_torch", lambda: None)  # torch itself is not the question here
    monkeypatch.setattr(conftest, "TRANSFORMERS_REQUIRED", False)
    with pytest.raises(pytest.skip.Exception, match="transformers failed to import"):
        conftest.import_transformers()
    monkeypatch.setattr(conftest, "TRANSFORMERS_REQUIRED", True)
    with pytest.raises(pytest.fail.Exception, match="ATTNKIT_TEST_TRANSFORMERS=1 requires it"):
        conftest.import_transformers()
