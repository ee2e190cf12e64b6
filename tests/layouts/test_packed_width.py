"""Layout (P) holds each of a sample's tensors in one ciphertext. A model with a tensor wider than the ring's slots is
refused when only (P) is asked for, before the activation search (minutes for a deep net: a ResNet-18 at 32x32 was
refused after 24 minutes of it), naming layout (A)."""
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import hemlp
from hemlp import model as hemlp_model
from hemlp.errors import UnsupportedError


def wide_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16 * 16, 3)).eval()


def test_too_wide_for_packed_is_refused_before_the_search(monkeypatch):
    def no_search(*a, **k):
        raise AssertionError("the activation search ran")

    monkeypatch.setattr(hemlp_model, "choose_activations", no_search)
    x = np.random.default_rng(0).uniform(-1, 1, (4, 1, 16, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UnsupportedError) as e:       # 8 x 16 x 16 = 2048 features > test-N10's 512 slots
            hemlp.compile(wide_cnn(), x, layout="packed", preset="test-N10", allow_insecure=True)
    msg = str(e.value)
    assert "2048" in msg and "layout='batch'" in msg


def test_a_ring_with_room_passes_the_check(monkeypatch):
    seen = []

    def stop(*a, **k):
        seen.append(True)
        raise RuntimeError("stop after the check")

    monkeypatch.setattr(hemlp_model, "choose_activations", stop)
    x = np.random.default_rng(0).uniform(-1, 1, (4, 1, 16, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="stop after the check"):
            hemlp.compile(wide_cnn(), x, layout="packed", preset="test-N12", allow_insecure=True)
    assert seen
