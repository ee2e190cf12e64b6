"""The GPU's int8 GEMM engine, as its exact numpy model (hemlp.gpu.int8_gemm): digit counts at their edges, the
int32 bound at its worst case, and the products equal to Python integers' and to the CPU core's modgemm words."""
import numpy as np
import pytest

from hemlp.errors import ParameterError
from hemlp.gpu.int8_gemm import (ALIGN, INT8_MAX_BLOCK, balanced_digit_count, balanced_digits, int8_blocks,
                                 modgemm_int8)

Q60 = 2 ** 60 - 2 ** 14 + 1     # odd 60- and 41-bit moduli
Q41 = 2199023190017


def bigint_modmul(U, X, q, mult=1):
    Ui, Xi = U.astype(object), X.astype(object)
    return ((Ui @ Xi) * mult % q).astype(np.uint64)


@pytest.mark.parametrize("bound", [0, 1, 127, 128, 32767, 32768, 32895, 32896, 2 ** 40, 2 ** 59, (Q60 - 1) // 2])
def test_digit_count_is_the_fewest_that_hold_the_bound(bound):
    T = balanced_digit_count(bound)
    v = np.array([bound, -bound, bound // 3, -(bound // 7)], dtype=np.int64)
    d = balanced_digits(v, T)
    assert np.array_equal(sum(d[t].astype(object) * 256 ** t for t in range(T)), v.astype(object))
    assert d.dtype == np.int8
    if T > 1:       # one digit fewer cannot hold +-bound
        with pytest.raises(ParameterError):
            balanced_digits(np.array([bound, -bound], dtype=np.int64), T - 1)


def test_digit_counts_of_the_product_shapes():
    # 8-bit weights: two U digits; a 60-bit q: 8 X digits, a 41-bit one 6
    assert balanced_digit_count(2 ** 8) == 2 and balanced_digit_count(2 ** 6) == 1
    assert balanced_digit_count((Q60 - 1) // 2) == 8 and balanced_digit_count((Q41 - 1) // 2) == 6


def test_k_blocks_cover_the_columns_within_the_int32_bound():
    for d2 in (1, 17, INT8_MAX_BLOCK, INT8_MAX_BLOCK + 1, 3 * INT8_MAX_BLOCK - 5):
        blocks = int8_blocks(d2)
        assert blocks[0][0] == 0 and blocks[-1][1] == d2
        assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
        assert max(k1 - k0 for k0, k1 in blocks) <= INT8_MAX_BLOCK
        assert all(k0 % ALIGN == 0 for k0, _ in blocks)


@pytest.mark.parametrize("q, bU", [(Q60, 8), (Q41, 12), (Q60, 40), (97, 3)])
def test_random_products_are_exact(q, bU):
    rng = np.random.default_rng(bU)
    U = rng.integers(-(1 << bU), (1 << bU) + 1, size=(7, 33), dtype=np.int64)
    U[0, :3] = [1 << bU, -(1 << bU), 0]                       # the bound itself, both signs
    X = rng.integers(0, q, size=(33, 5), dtype=np.uint64)
    X[:4, 0] = [0, q - 1, q // 2, q // 2 + 1]                  # the centring's edges
    for mult in (1, q - 2):
        np.testing.assert_array_equal(modgemm_int8(U, X, q, mult, bU), bigint_modmul(U, X, q, mult))


def test_worst_case_block_sums_stay_exact():
    """Every digit product at -128 * -128 over a whole K-block sums to 2^14 * INT8_MAX_BLOCK = 2^30: the int32 sums
    hold (the model raises where one leaves int32), and a product over three K-blocks still equals the Python
    integers'."""
    v = -128 * (1 + 256 + 256 ** 2)                           # a centred residue with three -128 digits
    for d2 in (INT8_MAX_BLOCK, 2 * INT8_MAX_BLOCK + 3):
        U = np.full((1, d2), -128, dtype=np.int64)            # digits (-128, 0)
        X = np.full((d2, 2), Q60 + v, dtype=np.uint64)
        X[:, 1] = (Q60 - 1) // 2
        np.testing.assert_array_equal(modgemm_int8(U, X, Q60, 1, 7), bigint_modmul(U, X, Q60))


def test_the_cpu_core_computes_the_same_words():
    core = pytest.importorskip("hemlp._core", reason="the CPU core (hemlp._core) is not built on this machine")
    rng = np.random.default_rng(5)
    U = rng.integers(-256, 257, size=(16, 96), dtype=np.int64)
    X = rng.integers(0, Q60, size=(96, 24), dtype=np.uint64)
    np.testing.assert_array_equal(modgemm_int8(U, X, Q60, 1, 8), core.modgemm(U, X, Q60, 8))


def test_bad_input_is_a_typed_error():
    U = np.ones((2, 3), dtype=np.int64)
    with pytest.raises(ParameterError, match="odd"):
        modgemm_int8(U, np.zeros((3, 1), dtype=np.uint64), 96)
    with pytest.raises(ParameterError, match="residue >= q"):
        modgemm_int8(U, np.full((3, 1), 97, dtype=np.uint64), 97)
    with pytest.raises(ParameterError, match="exceeds"):
        modgemm_int8(U * 9, np.zeros((3, 1), dtype=np.uint64), 97, bU=3)
