from __future__ import annotations

import pytest
import torch
import torch.utils.deterministic

from loadguard import poison


def settings():
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )


def test_fills_uninitialized_memory():
    with poison():
        assert torch.isnan(torch.empty(4)).all()
        assert torch.isnan(torch.empty_like(torch.zeros(2, 2, dtype=torch.bfloat16))).all()
        assert (torch.empty(3, dtype=torch.int64) == torch.iinfo(torch.int64).max).all()
        assert (torch.empty(3, dtype=torch.int32) == torch.iinfo(torch.int32).max).all()
        assert torch.empty(3, dtype=torch.bool).all()


def test_restores_settings_on_exit_and_on_error():
    before = settings()
    with poison():
        assert settings()[0] is True
    assert settings() == before
    with pytest.raises(RuntimeError), poison():
        raise RuntimeError("load failed")
    assert settings() == before


def test_nesting_restores_outer_state():
    before = settings()
    with poison():
        outer = settings()
        with poison():
            assert torch.isnan(torch.empty(2)).all()
        assert settings() == outer
        assert torch.isnan(torch.empty(2)).all()
    assert settings() == before


def test_keeps_strict_determinism_strict():
    before = settings()
    try:
        torch.use_deterministic_algorithms(True, warn_only=False)
        with poison():
            assert torch.is_deterministic_algorithms_warn_only_enabled() is False
        assert torch.are_deterministic_algorithms_enabled() is True
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
