"""compile(..., final_rescale=False): the final linear layer runs unrescaled at level 0, so the whole chain (and the
client's encryption) sits one level lower; checked against the numpy simulation and the default plan."""
import numpy as np
import pytest

import hemlp
from hemlp.compiler.params import final_pcmm, unrescaled
from hemlp.errors import UnsupportedError

from .conftest import mlp, torch_out


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(3).uniform(0, 1, size=(32, 64))


def test_final_pcmm_unrescaled_saves_a_level(data):
    model = mlp(dims=(64, 32, 16, 10), seed=2)
    x = data
    ref = hemlp.compile(model, x, batch_size=32, allow_insecure=True, layout="batch")
    cm = hemlp.compile(model, x, batch_size=32, allow_insecure=True, layout="batch", final_rescale=False)
    last = final_pcmm(cm.steps)
    assert unrescaled(last) and last.level_in == last.level_out == 0
    assert cm.plan.info["top_level"] == ref.plan.info["top_level"] - 1 - ref.plan.info["reserve"]
    assert 6 <= last.info["weight_bits"] <= 20
    sk, ek = cm.keygen()
    ct = cm.encrypt(x, sk)
    assert ct.ctm.level == cm.plan.info["top_level"]
    y, ys = cm.decrypt(cm.run(ct, ek), sk), cm.simulate(x)
    # CKKS noise, output at scale 2^40 * Delta_U: stated 2^-20 absolute (measured 2^-29; the default plan 2^-22)
    assert np.max(np.abs(y - ys)) < 2.0 ** -20 * max(1, np.abs(ys).max())
    # the last layer's fewer weight bits: still the model's top-1 and close to it
    yt = torch_out(model, x)
    assert np.max(np.abs(ys - yt)) < 2.0 ** -last.info["weight_bits"] * max(1, np.abs(yt).max())  # 13 bits: 2^-18.3
    assert np.mean(y.argmax(1) == yt.argmax(1)) == 1.0


def test_final_rescale_false_refuses_other_layouts(data):
    model = mlp(dims=(64, 32, 16, 10), seed=2)
    with pytest.raises(UnsupportedError, match="layout"):
        hemlp.compile(model, data, batch_size=1, allow_insecure=True, layout="packed", final_rescale=False)
    # on Ray: tests/runtime/test_ray_layouts.py (bit-identical to the in-process run)
