"""128-bit guard, parameter validation, randomness sources."""
import math
import re
import warnings
from pathlib import Path

import pytest

from hemlp import fhe
from hemlp.errors import InsecureParametersError, ParameterError

ROOT = Path(__file__).resolve().parents[2]
HE_STANDARD_128 = {13: 218, 14: 438, 15: 881, 16: 1747}  # N = 2^16: OpenFHE's current bound


@pytest.mark.parametrize("name", ["N14-d6", "N15-d10", "N16-boot"])
def test_presets_are_128_bit_secure_including_p(name):
    p = fhe.Params.preset(name)
    qp = 1
    for q in p.q + p.p:
        qp *= q
    assert math.log2(qp) <= HE_STANDARD_128[p.log_n]  # exact log2 of the big-integer product
    assert len(set(p.q + p.p)) == len(p.q) + len(p.p)
    assert p.is_128_bit_secure


def test_insecure_presets_need_explicit_opt_in():
    with pytest.raises(InsecureParametersError, match="allow_insecure"):
        fhe.Context("test-N12")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("default")
        fhe.Context("test-N10", allow_insecure=True)
    assert any(issubclass(x.category, fhe.InsecureParametersWarning) and "INSECURE" in str(x.message) for x in w)


def test_custom_parameters_over_the_table_are_refused():
    p = fhe.Params(13, [60, 60, 60, 60], [60], alpha=4)   # 300 bits > 218 at N=2^13
    assert not p.is_128_bit_secure
    with pytest.raises(InsecureParametersError, match="218"):
        fhe.Context(p)


def test_sparse_secret_is_not_covered_by_the_standard():
    p = fhe.Params(14, [60, 40], [60], alpha=2, secret_hw=64)
    with pytest.raises(InsecureParametersError):
        fhe.Context(p)


def test_invalid_parameters():
    with pytest.raises(ParameterError, match="alpha"):
        fhe.Params(12, [50, 40], [51], alpha=3)
    with pytest.raises(ParameterError, match="p_bits"):
        fhe.Params(12, [50, 40], [], alpha=1)
    with pytest.raises(ParameterError, match="unknown preset"):
        fhe.Params.preset("N99")
    with pytest.raises(ParameterError):
        fhe.Params(12, [70], [51])


def test_sigma_below_3_2_is_refused():
    from hemlp import _core

    s = _core.ParamsSpec()
    s.log_n, s.q_bits, s.p_bits, s.alpha, s.sigma = 12, [50], [51], 1, 3.0
    with pytest.raises(InsecureParametersError, match="3.2"):
        _core.Params(s)


def test_no_weak_rng_in_sources():
    pattern = re.compile(r"mt19937|\brand\s*\(|random_device|srand\s*\(|drand48")
    offenders = []
    for path in list((ROOT / "csrc").rglob("*.[ch]*")):
        text = path.read_text()
        offenders += [f"{path}: {m.group(0)}" for m in pattern.finditer(text)]
    assert not offenders, offenders


def test_key_material_comes_from_getrandom_and_aes_ctr():
    src = (ROOT / "csrc" / "ckks" / "sampler.cpp").read_text()
    assert "getrandom(" in src and "EVP_aes_256_ctr" in src
    keygen = (ROOT / "csrc" / "ckks" / "keygen.cpp").read_text()
    assert "os_seed()" in keygen


def test_fresh_keys_differ():
    from tests.conftest import make_ctx

    ctx = make_ctx("test-N10")
    a, _ = ctx.keygen()
    b, _ = ctx.keygen()
    assert a.key_id != b.key_id
    assert (a._obj.coeffs != b._obj.coeffs).any()
