"""Ring layer against big-integer oracles: primes, NTT, RNS base conversion, automorphisms."""
import random

import numpy as np
import pytest

from hemlp._core import ring


def schoolbook_negacyclic(a, b, q):
    n = len(a)
    out = [0] * n
    for i in range(n):
        for j in range(n):
            k = i + j
            if k < n:
                out[k] = (out[k] + a[i] * b[j]) % q
            else:
                out[k - n] = (out[k - n] - a[i] * b[j]) % q
    return out


def is_prime_ref(n):
    if n < 2:
        return False
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for a in [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37]:
        if n % a == 0:
            return n == a
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


@pytest.mark.parametrize("bits,log_n", [(30, 10), (40, 12), (50, 14), (60, 15), (61, 16)])
def test_ntt_primes(bits, log_n):
    ps = ring.ntt_primes(bits, log_n, 6)
    assert len(set(ps)) == 6
    for q in ps:
        assert q % (2 << log_n) == 1
        assert is_prime_ref(q)
        assert q < 2**61
        assert abs(q.bit_length() - bits) <= 1
    # alternating around 2^bits keeps the product close to 2^(6 bits) (below 2^60 only downward)
    assert abs(sum(np.log2(float(q)) for q in ps) - 6 * bits) < 0.01


def test_is_prime_matches_reference():
    rnd = random.Random(1)
    for _ in range(2000):
        n = rnd.getrandbits(rnd.choice([8, 20, 40, 62]))
        assert ring.is_prime(n) == is_prime_ref(n)
    # strong pseudoprimes to small bases
    for n in [3215031751, 2152302898747, 3474749660383, 341550071728321, 3825123056546413051]:
        assert not ring.is_prime(n)


@pytest.mark.parametrize("log_n", [4, 6, 8])
def test_primitive_root_and_ntt_of_x(log_n):
    q = ring.ntt_primes(40, log_n, 1)[0]
    n = 1 << log_n
    psi = ring.primitive_root_2n(q, log_n)
    assert pow(psi, n, q) == q - 1 and pow(psi, 2 * n, q) == 1
    x = np.zeros(n, dtype=np.uint64)
    x[1] = 1
    out = ring.ntt(x, q, log_n)
    expect = [pow(psi, 2 * ring.bit_reverse(j, log_n) + 1, q) for j in range(n)]
    assert [int(v) for v in out] == expect


@pytest.mark.parametrize("log_n,bits", [(4, 30), (7, 50), (9, 60), (10, 61)])
def test_ntt_product_matches_schoolbook(log_n, bits):
    q = ring.ntt_primes(bits, log_n, 1)[0]
    n = 1 << log_n
    rnd = random.Random(log_n)
    a = [rnd.randrange(q) for _ in range(n)]
    b = [rnd.randrange(q) for _ in range(n)]
    if log_n <= 7:
        expect = schoolbook_negacyclic(a, b, q)
    else:  # big-integer product via Python ints, reduced negacyclically
        full = [0] * (2 * n)
        A = np.array(a, dtype=object)
        for i, ai in enumerate(a):
            full[i : i + n] = [f + ai * bj for f, bj in zip(full[i : i + n], b)]
        expect = [(full[k] - full[k + n]) % q for k in range(n)]
        del A
    fa = ring.ntt(np.array(a, dtype=np.uint64), q, log_n)
    fb = ring.ntt(np.array(b, dtype=np.uint64), q, log_n)
    prod = np.array([int(x) * int(y) % q for x, y in zip(fa, fb)], dtype=np.uint64)
    got = ring.ntt(prod, q, log_n, inverse=True)
    assert [int(v) for v in got] == expect


def test_ntt_roundtrip_and_linearity():
    log_n, n = 12, 4096
    q = ring.ntt_primes(60, log_n, 1)[0]
    rng = np.random.default_rng(0)
    a = rng.integers(0, q, n, dtype=np.uint64)
    b = rng.integers(0, q, n, dtype=np.uint64)
    assert np.array_equal(ring.ntt(ring.ntt(a, q, log_n), q, log_n, inverse=True), a)
    s = np.array([(int(x) + int(y)) % q for x, y in zip(a, b)], dtype=np.uint64)
    fs = ring.ntt(s, q, log_n)
    fa, fb = ring.ntt(a, q, log_n), ring.ntt(b, q, log_n)
    assert all(int(z) == (int(x) + int(y)) % q for x, y, z in zip(fa, fb, fs))
    # extreme inputs: every residue q-1
    top = np.full(n, q - 1, dtype=np.uint64)
    assert np.array_equal(ring.ntt(ring.ntt(top, q, log_n), q, log_n, inverse=True), top)


def test_bit_reverse_is_involution():
    for bits in (1, 5, 12):
        assert all(ring.bit_reverse(ring.bit_reverse(i, bits), bits) == i for i in range(1 << bits))


def test_base_conversion_is_x_plus_small_multiple_of_q():
    src = ring.ntt_primes(50, 10, 3)
    dst = ring.ntt_primes(40, 10, 2) + ring.ntt_primes(61, 10, 1)
    Q = 1
    for q in src:
        Q *= q
    rnd = random.Random(3)
    xs = [rnd.randrange(Q) for _ in range(300)] + [0, 1, Q - 1]
    arr = np.array([[x % q for x in xs] for q in src], dtype=np.uint64)
    out = ring.base_convert(arr, src, dst)
    for c, x in enumerate(xs):
        vs = set()
        for j, p in enumerate(dst):
            got = int(out[j, c])
            # got = x + v Q (mod p) for some 0 <= v < |B|
            cands = [v for v in range(len(src)) if (x + v * Q) % p == got]
            assert cands, f"coefficient {c}: no v in [0, {len(src)}) explains the result"
            vs.update(cands)
        assert vs


def test_galois_permutation_matches_coefficient_automorphism():
    log_n, n = 6, 64
    q = ring.ntt_primes(40, log_n, 1)[0]
    rng = np.random.default_rng(5)
    a = rng.integers(0, q, n, dtype=np.uint64)
    for g in [5, 25, ring.galois_element_rotation(-1, log_n), 2 * n - 1]:
        coeff = ring.galois_coeff(a, g, log_n, q)
        # reference automorphism on Python ints
        ref = [0] * n
        for i in range(n):
            k = i * g % (2 * n)
            ref[k % n] = (int(a[i]) if k < n else -int(a[i])) % q
        assert [int(v) for v in coeff] == ref
        perm = ring.galois_ntt_permutation(g, log_n)
        fa = ring.ntt(a, q, log_n)
        assert np.array_equal(fa[np.array(perm)], ring.ntt(coeff, q, log_n))


def test_galois_elements():
    log_n = 10
    assert ring.galois_element_rotation(1, log_n) == 5
    assert ring.galois_element_rotation(0, log_n) == 1
    g, gi = ring.galois_element_rotation(3, log_n), ring.galois_element_rotation(-3, log_n)
    assert g * gi % (2 << log_n) == 1


def test_barrett_multiplication():
    rnd = random.Random(9)
    for bits in (30, 45, 60, 61):
        q = ring.ntt_primes(bits, 12, 1)[0]
        for _ in range(500):
            a, b = rnd.randrange(q), rnd.randrange(q)
            assert ring.mul_mod_barrett(a, b, q) == a * b % q
        assert ring.mul_mod_barrett(q - 1, q - 1, q) == 1


def test_centred_base_conversion_is_x_centred_plus_small_multiple():
    src = ring.ntt_primes(50, 10, 3)
    dst = ring.ntt_primes(40, 10, 2)
    Q = 1
    for q in src:
        Q *= q
    rnd = random.Random(4)
    xs = [rnd.randrange(Q) for _ in range(300)] + [0, 1, Q - 1, Q // 2, Q // 2 + 1]
    arr = np.array([[x % q for x in xs] for q in src], dtype=np.uint64)
    out = ring.base_convert(arr, src, dst, centred=True)
    for c, x in enumerate(xs):
        xc = x - Q if x > Q // 2 else x
        for j, p in enumerate(dst):
            got = int(out[j, c])
            vs = [v for v in range(-3, 4) if (xc + v * Q) % p == got]
            assert vs and min(abs(v) for v in vs) <= len(src) // 2 + 1
