"""Bootstrapping parameter sets: the 128-bit bound at N = 2^16 (1747, OpenFHE's current uniform-ternary bound),
the reshaped N16-boot (docs/design/bootstrap.md §2: set B minus one 40-bit level), the insecure test chains, and
the structural conditions bootstrapping relies on (q0·p0 <= 121 bits, largest digit <= log P, prime counts)."""
import math
import warnings

import pytest

from hemlp import fhe
from hemlp.errors import InsecureParametersError


def exact_log2(primes) -> float:
    prod = 1
    for q in primes:
        prod *= q
    return math.log2(prod)


def test_n16_bound_is_1747_and_lattigo_1767_is_refused():
    assert fhe.Params.preset("N16-boot").max_log_qp_128 == 1747
    old = fhe.Params(16, (60,) + (40,) * 13 + (39,) * 3 + (60,) * 8 + (56,) * 4, (61,) * 6, alpha=6, name="N16QP1767")
    assert old.log_qp > 1747 and not old.is_128_bit_secure
    with pytest.raises(InsecureParametersError, match="1747"):
        fhe.Context(old)


def test_n16_boot_is_set_b_minus_one_level():
    p = fhe.Params.preset("N16-boot")
    bits = [round(math.log2(q)) for q in p.q]
    assert bits == [60] + [40] * 12 + [39] * 3 + [61] * 8 + [56] * 4
    assert [round(math.log2(q)) for q in p.p] == [61] * 6 and p.alpha == 6
    assert exact_log2(p.q + p.p) <= 1747 and p.is_128_bit_secure
    assert p.max_level == 27
    # levels left after CtS (4) + EvalMod (8) + StC (3)
    assert p.max_level - 4 - 8 - 3 == 12


@pytest.mark.parametrize("name", ["N16-boot", "test-N12-boot", "test-N10-boot"])
def test_structure(name):
    p = fhe.Params.preset(name)
    assert len(set(p.q + p.p)) == len(p.q) + len(p.p)
    # the encapsulation key lives on {q0, p0}: <= 121 bits for h = 32 at 128-bit
    assert exact_log2([p.q[0], p.p[0]]) <= 121
    # hybrid key switching: every digit of alpha primes stays below P
    log_p = exact_log2(p.p)
    for t in range(0, len(p.q), p.alpha):
        assert exact_log2(p.q[t:t + p.alpha]) <= log_p
    # the fused 1-digit sparse->dense switch needs |c1| < q0/2 < P
    assert p.q[0] < math.prod(p.p)


@pytest.mark.parametrize("name,log_n", [("test-N12-boot", 12), ("test-N10-boot", 10)])
def test_test_chains_are_loudly_insecure(name, log_n):
    p = fhe.Params.preset(name)
    assert p.log_n == log_n and not p.is_128_bit_secure
    assert [round(math.log2(q)) for q in p.q] == [60] + [40] * 3 + [39] * 2 + [61] * 8 + [56] * 3
    assert [round(math.log2(q)) for q in p.p] == [61] * 3 and p.alpha == 3
    with pytest.raises(InsecureParametersError):
        fhe.Context(name)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fhe.Context(name, allow_insecure=True)
    assert any("INSECURE" in str(x.message) for x in w)
    note = next(d["note"] for d in fhe.Params.presets() if d["name"] == name)
    assert note.startswith("INSECURE")


def test_every_secure_preset_is_under_the_table():
    for d in fhe.Params.presets():
        p = fhe.Params.preset(d["name"])
        if d["security"] == "128-bit":
            assert exact_log2(p.q + p.p) <= p.max_log_qp_128, d["name"]
