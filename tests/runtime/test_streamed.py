"""Layout (A) chains run by blocks of features (hemlp.runtime.streamed): the same bits as the whole-layer run, for a
gathered convolution and a dense layer as the chain's head, x² and a fitted ReLU polynomial in the middle, one and
two slot chunks per feature; and the peak memory it saves."""
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hemlp  # noqa: E402
from hemlp.runtime import local, streamed  # noqa: E402
from hemlp.runtime.streamed import ct_bytes  # noqa: E402
from tests.compiler.conftest import Square  # noqa: E402


def fhe4dmm_like(act=Square):
    """conv (gathered pcmm) -> act -> flatten -> FC -> act -> FC: FHE4DMM's 5-layer shape, small."""
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 3, 3, 2), act(), torch.nn.Flatten(), torch.nn.Linear(27, 6),
                               act(), torch.nn.Linear(6, 4)).eval()


def compiled(model, x, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(model, x[:1], calibration=x[:256], batch_size=x.shape[0], allow_insecure=True,
                           layout="batch", **kw)
        sk, ek = cm.keygen()
        ct = cm.encrypt(x, sk)
    return cm, sk, ek, ct


def run(cm, ct, ek, stream_bytes, timings=None):
    return local.run(cm.context, cm.steps, ct.ctm, ek.relin_key, cm.weight_bits, timings, stream_bytes=stream_bytes)


def same_bits(A, B) -> bool:
    return A.shape == B.shape and A.chunks == B.chunks and all(
        p.to_bytes() == q.to_bytes() for p, q in zip(A.cts, B.cts, strict=True))


def chains_of(cm):
    steps = cm.steps
    last_use = {n: i for i, s in enumerate(steps) for n in s.inputs}
    out = next(s.out for s in steps if s.op == "output")
    return {steps[i].out: [steps[k].op for k in idx] for i, idx in streamed.find_chains(steps, last_use, out).items()}


@pytest.mark.parametrize("act, slots_factor", [(Square, 2), (torch.nn.ReLU, 1)])
def test_streamed_chain_has_the_same_bits(act, slots_factor):
    rng = np.random.default_rng(5)
    model = fhe4dmm_like(act)
    kw = {} if act is Square else dict(activation_degree=7)
    probe = compiled(model, rng.uniform(0, 1, size=(4, 1, 8, 8)), **kw)[0]
    n = probe.context.N // 2 * slots_factor - 3            # two chunks per feature when slots_factor = 2
    x = rng.uniform(0, 1, size=(n, 1, 8, 8))
    cm, sk, ek, ct = compiled(model, x, **kw)
    chains = chains_of(cm)
    head = next(iter(chains))
    assert chains[head][0] == "pcmm" and chains[head][-1] == "pcmm"
    assert ("square" if act is Square else "poly") in chains[head]
    assert cm.steps[[s.out for s in cm.steps].index(head)].index is not None   # the gathered convolution
    whole = run(cm, ct, ek, None)
    t = {}
    blocks = run(cm, ct, ek, 1, t)                          # 1 byte: every block is one output channel
    assert blocks.chunks == slots_factor
    assert same_bits(blocks, whole)
    assert set(s.out for s in cm.steps if s.op not in ("input", "alias", "output")) <= set(t)
    # and the two agree with the plaintext plan (the bits are right, not only equal)
    y = hemlp.pcmm.decrypt_matrix(cm.context, blocks, sk)[:, :n].T
    assert np.max(np.abs(y - cm.simulate(x).reshape(n, -1))) < 1e-2 * np.max(np.abs(y))


def test_dense_head_chain_has_the_same_bits():
    """FC -> x² -> FC (an MLP's chain: a dense head, no gather)."""
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(20, 12), Square(), torch.nn.Linear(12, 5)).eval()
    x = np.random.default_rng(6).normal(size=(40, 20))
    cm, sk, ek, ct = compiled(model, x)
    assert list(chains_of(cm).values()) == [["pcmm", "square", "pcmm"]]
    assert same_bits(run(cm, ct, ek, 5 * ct_bytes(cm.context.N, 9)), run(cm, ct, ek, None))


def test_peak_bytes_counts_whole_layers_and_blocks():
    model = fhe4dmm_like()
    x = np.random.default_rng(1).uniform(0, 1, size=(8, 1, 8, 8))
    cm = compiled(model, x)[0]
    N, steps = cm.context.N, cm.steps
    lv = {s.out: s.level_out for s in steps}
    conv, sq = [s for s in steps if s.op in ("pcmm", "square")][:2]
    inp = next(s for s in steps if s.op == "input")
    # whole layers: while the square runs, the input (held by the caller), the convolution and the square are live
    expect = 64 * ct_bytes(N, lv[inp.out]) + 27 * (ct_bytes(N, lv[conv.out]) + ct_bytes(N, lv[sq.out]))
    assert streamed.peak_bytes(steps, N, 1, None) == expect
    # one channel (9 rows) at a time, plus FC1's partial sums and their sum (6 rows one level up)
    fc1 = next(s for s in steps if s.op == "pcmm" and s.index is None)
    blocked = (64 * ct_bytes(N, lv[inp.out]) + 9 * (ct_bytes(N, lv[conv.out]) + ct_bytes(N, lv[sq.out]))
               + 6 * ct_bytes(N, fc1.level_out + 1) + 6 * ct_bytes(N, fc1.level_out))
    assert streamed.peak_bytes(steps, N, 1, 1) == blocked < expect
