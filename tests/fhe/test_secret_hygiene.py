"""Secret material on the client side: files, seeds, parameters that would be silently ignored."""
import os
import stat
import warnings

import numpy as np
import pytest

from hemlp import fhe, pcmm
from hemlp.errors import ParameterError


def _ctx(name="test-N12"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fhe.Context(name, allow_insecure=True)


def test_secret_key_file_is_owner_only_from_creation(tmp_path):
    ctx = _ctx()
    sk, pk = ctx.keygen()
    old = os.umask(0o000)  # even a permissive umask must not expose it
    try:
        sk.save(tmp_path / "secret.key")
        pk.save(tmp_path / "public.key")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "secret.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "public.key").stat().st_mode) == 0o666  # public material keeps the old mode
    back = fhe.load(tmp_path / "secret.key", ctx)
    assert back.key_id == sk.key_id
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_msrlwe_session_seed_is_single_use(rng):
    ctx = _ctx()
    msk = pcmm.multi_secret_key(ctx, 2)
    M = rng.uniform(-1, 1, (3, ctx.slots + 5))
    seed = bytes(range(32))
    pcmm.encrypt_matrix(ctx, M, msk, session_seed=seed)
    with pytest.raises(ParameterError, match="session seed was already used"):
        pcmm.encrypt_matrix(ctx, -M, msk, session_seed=seed)
    # fresh randomness (the default) never collides; another key may use the seed once
    a = pcmm.encrypt_matrix(ctx, M, msk)
    b = pcmm.encrypt_matrix(ctx, M, msk)
    assert a.session != b.session
    pcmm.encrypt_matrix(ctx, M, pcmm.multi_secret_key(ctx, 2), session_seed=seed)


def test_sigma_other_than_the_sampler_s_is_refused():
    from hemlp import _core

    spec = _core.ParamsSpec()
    spec.name, spec.log_n, spec.q_bits, spec.p_bits, spec.alpha = "s", 12, [50, 40], [51], 1
    spec.sigma = 4.0
    with pytest.raises(ParameterError, match="only sigma = 3.2"):
        _core.Params(spec)
    spec.sigma = 3.2
    _core.Params(spec)


def test_public_key_id_is_a_tag_not_secret_material():
    ctx = _ctx("test-N10")
    ids = {ctx.keygen()[0].key_id for _ in range(8)}
    assert len(ids) == 8 and all(i & 1 for i in ids)
