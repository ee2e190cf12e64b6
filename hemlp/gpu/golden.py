"""Bit-exactness cases between the CPU core and the CUDA backend, with digests a machine without the other side
can check against.

Each case draws its inputs (polynomials, and switching keys with uniform digits: key switching is the same
arithmetic on any key) from a Philox stream of a fixed seed, so the CPU core and the device see the same words
without shipping them; the SHA-256 of each case's outputs is the digest. ``compute_cpu`` runs the CPU core (it
needs ``hemlp._core``); ``compute_gpu`` runs the device (it needs only the CUDA library and numpy). The committed
table (tests/gpu/golden_digests.json) holds the CPU digests and each preset's DeviceSpec; a CPU test re-derives
it from the core, so it cannot go stale, and the device check compares against it.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hemlp.gpu.device import CudaEvaluator, DeviceCiphertext, DeviceSpec, GemmPlan, rotation_galois_element
from hemlp.gpu.boot_steps import DeviceEncapsulationKeys, dense_to_sparse, mod_raise
from hemlp.gpu.library import check
from hemlp.gpu.lintrans import DeviceLinearTransform
from hemlp.gpu.polyeval import evaluate_polynomial

KEY_ID = 0x5EED_0000_0000_0001
CONST_OPS = ("mul_integer", "mul_const", "add_const_exact")
#: an integer, a constant and its scale for the constant cases (negative, with a rounding tie far below 2^-40)
CONST_ARGS = (-1234567890123, -0.7316421875123, 2.0 ** 52)
SCALE = 2.0 ** 40


@dataclass(frozen=True)
class Case:
    preset: str
    op: str
    level: int  # -1: the top level
    seed: int
    steps: tuple = ()

    @property
    def name(self) -> str:
        lv = "top" if self.level < 0 else str(self.level)
        extra = ("-steps" + ",".join(str(s) for s in self.steps)) if self.steps else ""
        return f"{self.preset}/{self.op}/L{lv}{extra}"


def _cases(preset: str, levels: tuple) -> list:
    out = []
    for i, lv in enumerate(levels):
        s = 1000 * (i + 1)
        out += [Case(preset, "ntt", lv, s + 1), Case(preset, "intt", lv, s + 2), Case(preset, "add", lv, s + 3),
                Case(preset, "sub", lv, s + 4), Case(preset, "negate", lv, s + 5), Case(preset, "mul", lv, s + 6),
                Case(preset, "tensor", lv, s + 7), Case(preset, "relinearize", lv, s + 9),
                Case(preset, "rotate", lv, s + 11, (1,)), Case(preset, "rotate", lv, s + 12, (-3,)),
                Case(preset, "rotate_hoisted", lv, s + 13, (1, 2, -5))]
        out += [Case(preset, "mul_integer", lv, s + 14), Case(preset, "mul_const", lv, s + 15),
                Case(preset, "add_const_exact", lv, s + 16)]
        if lv != 0:
            out += [Case(preset, "rescale", lv, s + 8), Case(preset, "mul_relin_rescale", lv, s + 10)]
    # the same product on both GEMM engines: the CPU core's words from each
    out += [Case(preset, "modgemm", 0, 99), Case(preset, "modgemm_int8", 0, 99)]
    out += [Case(preset, "pcmm_rlwe", lv, 7000 + i) for i, lv in enumerate(levels) if lv != 0]
    # MLWE: every test-N12 level (k = 4), the lower N16-boot level only (k = 2; its top-level keys alone are 356 MB)
    out += [Case(preset, "pcmm_mlwe", lv, 7500 + i) for i, lv in enumerate(levels)
            if preset == "test-N12" or lv >= 0]
    out += [Case(preset, "pcmm_msrlwe", lv, 7700 + i) for i, lv in enumerate(levels)
            if preset == "test-N12" or lv >= 0]
    out += [Case(preset, "lintrans", lv, 8000 + 10 * i + v, (v,)) for i, lv in enumerate(levels) if lv != 0
            for v in (0, 1)]
    out += [Case(preset, "polyeval", -1, 9000, (0,)), Case(preset, "polyeval", -1, 9001, (1,))]
    out += [Case(preset, "dense_to_sparse", 0, 9100), Case(preset, "mod_raise", -1, 9101),
            Case(preset, "mod_raise", levels[1], 9102)]
    out += [Case(preset, "mul_monomial", levels[0], 9200 + i, (k,)) for i, k in enumerate((5, -7, 1 << 30))]
    return out


#: test-N12: 4 q primes, beta = 2 (insecure, fast); N16-boot: the 128-bit bootstrapping set (28 q, 6 P, 5 digits)
CASES = _cases("test-N12", (-1, 1, 0)) + _cases("N16-boot", (-1, 13))
TABLE = Path(__file__).resolve().parents[2] / "tests" / "gpu" / "golden_digests.json"


def level_of(spec: DeviceSpec, case: Case) -> int:
    return spec.max_level if case.level < 0 else case.level


def _stream(seed: int, count: int) -> np.ndarray:
    return np.random.Generator(np.random.Philox(key=seed)).bit_generator.random_raw(count).astype(np.uint64)


def poly(spec: DeviceSpec, seed: int, level: int, ext: bool = False) -> np.ndarray:
    """Uniform residues over Q_level (∪ P with ext), (limbs, N), from the Philox stream of `seed`."""
    limbs = level + 1 + (len(spec.p) if ext else 0)
    raw = _stream(seed, limbs * spec.n).reshape(limbs, spec.n)
    mods = np.array([spec.modulus(spec.qp_index(level, k) if ext else k) for k in range(limbs)], dtype=np.uint64)
    return raw % mods[:, None]


def key_digits(spec: DeviceSpec, seed: int, level: int) -> tuple:
    """(bs, as) of a switching key for `level`: num_digits(level) uniform (level + 1 + K, N) digits each."""
    beta = spec.num_digits(level)
    bs = [poly(spec, seed * 64 + 2 * t, level, ext=True) for t in range(beta)]
    as_ = [poly(spec, seed * 64 + 2 * t + 1, level, ext=True) for t in range(beta)]
    return bs, as_


def galois_element(spec: DeviceSpec, step: int) -> int:
    return rotation_galois_element(spec.n, step)


def gemm_inputs(spec: DeviceSpec, seed: int) -> tuple:
    """(U, X, q, bU): a 48 x 192 signed 8-bit matrix times 192 rows of residues mod q_0 (N columns)."""
    rng = np.random.Generator(np.random.Philox(key=seed))
    U = rng.integers(-(1 << 8), (1 << 8) + 1, size=(48, 192), dtype=np.int64)
    q = spec.q[0]
    X = (_stream(seed + 1, 192 * spec.n) % np.uint64(q)).reshape(192, spec.n)
    return U, X, q, 8


def pcmm_inputs(spec: DeviceSpec, seed: int) -> tuple:
    """(U, K, chunks): a 12 x 20 signed 6-bit matrix, K = 3, 2 chunks (40 input ciphertexts)."""
    rng = np.random.Generator(np.random.Philox(key=seed))
    return rng.integers(-(1 << 6), (1 << 6) + 1, size=(12, 20), dtype=np.int64), 3, 2


def mlwe_inputs(spec: DeviceSpec, seed: int) -> tuple:
    """(U, K, k): k = 4 rows per ciphertext at N = 2^12 (2 at larger N), 3 input ciphertexts, 2 output groups; U
    signed 6-bit, K = -3 (a negative multiplier: its residue path too)."""
    k = 4 if spec.n <= 4096 else 2
    rng = np.random.Generator(np.random.Philox(key=seed))
    return rng.integers(-(1 << 6), (1 << 6) + 1, size=(2 * k, 3 * k), dtype=np.int64), -3, k


def msrlwe_inputs(spec: DeviceSpec, seed: int) -> tuple:
    """(U, K, k, rows): 6 rows of k = 3 chunks, row 2 absent (a zero row), an 8 x 6 signed 6-bit U, K = 5."""
    rng = np.random.Generator(np.random.Philox(key=seed))
    return rng.integers(-(1 << 6), (1 << 6) + 1, size=(8, 6), dtype=np.int64), 5, 3, [0, 1, 3, 4, 5]


#: BSGS structures of the lintrans cases: (giant steps, baby steps per group, rescale). The second one starts with a
#: rotated group and adds unrotated groups to it (every branch of the double-hoisted schedule).
LINTRANS_SHAPES = (((0, 4, 8), ((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 3)), True),
                   ((4, 0, 0), ((1, 2), (0, 3), (2,)), False))


def lintrans_inputs(spec: DeviceSpec, seed: int, level: int, variant: int) -> tuple:
    """(giant, baby, diagonals, rescale, steps) with uniform diagonals over Q_level ∪ P."""
    giant, baby, rescale = LINTRANS_SHAPES[variant]
    count = sum(len(b) for b in baby)
    diags = [poly(spec, seed * 100 + t, level, ext=True) for t in range(count)]
    steps = sorted({b for grp in baby for b in grp if b} | {g for g in giant if g})
    return list(giant), [list(b) for b in baby], diags, rescale, steps


def polyeval_inputs(spec: DeviceSpec, seed: int, level: int, variant: int) -> tuple:
    """(coefficients, basis): variant 0 a Chebyshev polynomial of the largest degree the level allows (at most
    31), variant 1 a power-basis one of degree 5; coefficients uniform in [-1, 1] from the seed."""
    rng = np.random.Generator(np.random.Philox(key=seed))
    deg = min(31, (1 << level) - 1) if variant == 0 else 5
    return [float(v) for v in rng.uniform(-1, 1, deg + 1)], ("chebyshev", "power")[variant]


def encapsulation_inputs(spec: DeviceSpec, seed: int) -> tuple:
    """(small_b, small_a, big_b, big_a) uniform, the big ones for the top level."""
    top = spec.max_level
    return (poly(spec, seed, 0, ext=True)[:2], poly(spec, seed + 1, 0, ext=True)[:2],
            poly(spec, seed + 2, top, ext=True), poly(spec, seed + 3, top, ext=True))


def digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype="<u8").tobytes())
    return h.hexdigest()


def elementwise_product(a: np.ndarray, b: np.ndarray, spec: DeviceSpec) -> np.ndarray:
    """a * b mod q_k per limb, exactly, in Python integers (an independent reference for the device's multiply)."""
    q = np.array([spec.q[k] for k in range(a.shape[0])], dtype=object)[:, None]
    return ((a.astype(object) * b.astype(object)) % q).astype(np.uint64)


# ---------------------------------------------------------------------------------------------------- CPU side
def cpu_context(preset: str):
    import warnings

    from hemlp import fhe
    from hemlp.errors import InsecureParametersWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureParametersWarning)
        return fhe.Context(preset, allow_insecure=True)


def compute_cpu(case: Case, ctx, spec: DeviceSpec) -> str:
    """The case's outputs from the CPU core, as a digest."""
    from hemlp import _core

    e, lv, s = ctx.native, level_of(spec, case), case.seed
    imp = lambda polys: e.import_ciphertext(list(polys), lv, SCALE, spec.n // 2, 0, False, KEY_ID, None)  # noqa: E731
    imp0 = lambda polys, kid: e.import_ciphertext(list(polys), 0, SCALE, spec.n // 2, 0, False, kid, None)  # noqa: E731
    outs = lambda ct: [ct.poly(j) for j in range(ct.size)]  # noqa: E731
    op = case.op
    if op in ("ntt", "intt"):
        a = poly(spec, s, lv, ext=True)
        return digest([e.ntt_limb(a[k] if op == "ntt" else np.ascontiguousarray(a[k]), spec.qp_index(lv, k),
                                  op == "intt") for k in range(a.shape[0])])
    if op == "mul":
        return digest([elementwise_product(poly(spec, s, lv), poly(spec, s + 500, lv), spec)])
    if op in ("modgemm", "modgemm_int8"):
        U, X, q, bU = gemm_inputs(spec, s)
        return digest([_core.modgemm(U, X, q, bU)])
    if op in ("dense_to_sparse", "mod_raise"):
        keys = _core.import_encapsulation_keys(e, *encapsulation_inputs(spec, s), KEY_ID, KEY_ID + 1, 32,
                                               spec.max_level)
        if op == "dense_to_sparse":
            return digest(outs(_core.dense_to_sparse(e, imp0([poly(spec, s + 5, 0), poly(spec, s + 6, 0)], KEY_ID),
                                                     keys)))
        low = imp0([poly(spec, s + 5, 0), poly(spec, s + 6, 0)], KEY_ID + 1)
        return digest(outs(_core.mod_raise(e, low, keys, lv)))
    if op == "mul_monomial":
        from hemlp.fhe import Ciphertext
        from hemlp.he.reinterpret import mul_monomial

        x = ctx.wrap(Ciphertext, imp([poly(spec, s, lv), poly(spec, s + 1, lv)]))
        return digest(outs(mul_monomial(ctx, x, case.steps[0]).native))
    if op == "polyeval":
        coeffs, basis = polyeval_inputs(spec, s, lv, case.steps[0])
        rlk = e.switch_key_from_arrays(*key_digits(spec, s, lv), 0, lv, KEY_ID)
        out, _ = _core.poly_evaluate(e, imp([poly(spec, s, lv), poly(spec, s + 1, lv)]), coeffs,
                                     0 if basis == "chebyshev" else 1, rlk, SCALE, -1)
        return digest(outs(out))
    if op == "lintrans":
        giant, baby, diags, rescale, steps = lintrans_inputs(spec, s, lv, case.steps[0])
        lt = _core.LinearTransform.from_encoded(e, spec.n // 2, lv, 2.0 ** 30, giant, baby, diags, True, False)
        keys = [e.switch_key_from_arrays(*key_digits(spec, s * 10 + st, lv), galois_element(spec, st), lv, KEY_ID)
                for st in steps]
        x = imp([poly(spec, s, lv), poly(spec, s + 1, lv)])
        out, _ = lt.apply(e, x, e.make_galois_keys(keys, KEY_ID), 2, rescale)
        return digest(outs(out))
    if op == "pcmm_rlwe":
        U, K, c = pcmm_inputs(spec, s)
        cts = [imp([poly(spec, s + 10 + 2 * i, lv), poly(spec, s + 11 + 2 * i, lv)]) for i in range(U.shape[1] * c)]
        res = _core.pcmm_rlwe(e, _core.ModGemmPlan(U, 6), cts, c, K, 0.5, True, [])
        return digest([p for ct in res for p in outs(ct)])
    if op == "pcmm_msrlwe":
        U, K, k, present = msrlwe_inputs(spec, s)
        rows = [_core.ms_import(e, poly(spec, s + 100 * i, lv), [poly(spec, s + 100 * i + 1 + j, lv) for j in range(k)],
                                lv, SCALE, spec.n // 2, 0, KEY_ID, None) if i in present else None
                for i in range(U.shape[1])]
        res = _core.pcmm_msrlwe(e, _core.ModGemmPlan(U, 6), rows, K, 0.5, None)
        return digest([p for r in res for p in [r.poly_a()] + [r.poly_b(j) for j in range(k)]])
    if op == "pcmm_mlwe":
        U, K, k = mlwe_inputs(spec, s)
        cts = [e.import_ciphertext([poly(spec, s + 10 + 2 * i, lv), poly(spec, s + 11 + 2 * i, lv)], lv, SCALE,
                                   spec.n, 1, False, KEY_ID, None) for i in range(U.shape[1] // k)]
        keys = [e.switch_key_from_arrays(*key_digits(spec, s * 10 + v, lv), 0, lv, KEY_ID) for v in range(k)]
        res = _core.pcmm_mlwe(e, _core.ModGemmPlan(U, 6), cts, k, K, 0.5, keys)
        return digest([p for ct in res for p in outs(ct)])
    a = imp([poly(spec, s, lv), poly(spec, s + 1, lv)])
    if op in ("add", "sub"):
        b = imp([poly(spec, s + 2, lv), poly(spec, s + 3, lv)])
        return digest(outs(e.add(a, b) if op == "add" else e.sub(a, b)))
    if op == "negate":
        return digest(outs(e.negate(a)))
    if op in CONST_OPS:
        k, c, cs = CONST_ARGS
        r = (e.mul_integer(a, k) if op == "mul_integer" else _core.mul_const(e, a, c, cs) if op == "mul_const"
             else _core.add_const_exact(e, a, c))
        return digest(outs(r))
    if op == "rescale":
        return digest(outs(e.rescale(a)))
    b = imp([poly(spec, s + 2, lv), poly(spec, s + 3, lv)])
    if op == "tensor":
        return digest(outs(e.mul(a, b, None)))
    if op in ("relinearize", "mul_relin_rescale"):
        bs, as_ = key_digits(spec, s, lv)
        rlk = e.switch_key_from_arrays(bs, as_, 0, lv, KEY_ID)
        if op == "relinearize":
            c3 = imp([poly(spec, s, lv), poly(spec, s + 1, lv), poly(spec, s + 4, lv)])
            return digest(outs(e.relinearize(c3, rlk)))
        return digest(outs(e.mul_relin_rescale(a, b, rlk)))
    if op in ("rotate", "rotate_hoisted"):
        gs = [galois_element(spec, st) for st in case.steps]
        keys = [e.switch_key_from_arrays(*key_digits(spec, s * 10 + i, lv), g, lv, KEY_ID) for i, g in enumerate(gs)]
        gk = e.make_galois_keys(keys, KEY_ID)
        if op == "rotate":
            return digest(outs(e.apply_galois(a, gs[0], gk)))
        return digest([p for ct in e.apply_galois_hoisted(a, gs, gk) for p in outs(ct)])
    raise ValueError(f"unknown case op {op!r}")


def build_table(cases=CASES) -> dict:
    """{'specs': {preset: DeviceSpec dict}, 'cases': {name: digest}} from the CPU core."""
    specs, digests, ctxs = {}, {}, {}
    for case in cases:
        if case.preset not in ctxs:
            ctxs[case.preset] = cpu_context(case.preset)
            specs[case.preset] = DeviceSpec.from_context(ctxs[case.preset])
        digests[case.name] = compute_cpu(case, ctxs[case.preset], specs[case.preset])
    return {"specs": {k: v.to_dict() for k, v in specs.items()}, "cases": digests}


def load_table(path: Path = TABLE) -> dict:
    return json.loads(Path(path).read_text())


# ---------------------------------------------------------------------------------------------------- GPU side
def compute_gpu(case: Case, dev: CudaEvaluator) -> str:
    """The case's outputs from the device, as a digest."""
    spec, lv, s = dev.spec, level_of(dev.spec, case), case.seed
    ct = lambda polys: DeviceCiphertext([dev.upload_poly(p) for p in polys], lv, SCALE, spec.n // 2, 0,  # noqa: E731
                                        False, KEY_ID, spec.param_hash)
    outs = lambda d: [dev.download_poly(p, d.level + 1) for p in d.polys]  # noqa: E731
    op = case.op
    if op in ("ntt", "intt"):
        buf = dev.upload_poly(poly(spec, s, lv, ext=True))
        dev.ntt(buf, lv, ext=True, inverse=op == "intt")
        return digest([dev.download_poly(buf, lv + 1 + len(spec.p))])
    if op == "mul":
        a, b = dev.upload_poly(poly(spec, s, lv)), dev.upload_poly(poly(spec, s + 500, lv))
        out = dev.empty(lv + 1)
        check(dev.lib.hg_mul(dev.handle, a.handle, b.handle, out.handle, lv), "mul")
        return digest([dev.download_poly(out, lv + 1)])
    if op in ("modgemm", "modgemm_int8"):
        U, X, q, bU = gemm_inputs(spec, s)
        return digest([dev.modgemm(U, X, q, bU, engine="int8" if op == "modgemm_int8" else "fp64")])
    if op in ("dense_to_sparse", "mod_raise"):
        keys = DeviceEncapsulationKeys(dev, spec.max_level, *encapsulation_inputs(spec, s), KEY_ID, KEY_ID + 1)
        if op == "dense_to_sparse":
            x = DeviceCiphertext([dev.upload_poly(poly(spec, s + 5 + j, 0)) for j in range(2)], 0, SCALE,
                                 spec.n // 2, 0, False, KEY_ID, spec.param_hash)
            return digest(outs(dense_to_sparse(dev, x, keys)))
        x = DeviceCiphertext([dev.upload_poly(poly(spec, s + 5 + j, 0)) for j in range(2)], 0, SCALE, spec.n // 2,
                             0, False, KEY_ID + 1, spec.param_hash)
        return digest(outs(mod_raise(dev, x, keys, lv)))
    if op == "mul_monomial":
        return digest(outs(dev.mul_monomial(ct([poly(spec, s, lv), poly(spec, s + 1, lv)]), case.steps[0])))
    if op == "polyeval":
        coeffs, basis = polyeval_inputs(spec, s, lv, case.steps[0])
        rlk = dev.upload_key_arrays(*key_digits(spec, s, lv), lv, 0, KEY_ID)
        out = evaluate_polynomial(dev, ct([poly(spec, s, lv), poly(spec, s + 1, lv)]), coeffs, basis, rlk, SCALE)
        return digest(outs(out))
    if op == "lintrans":
        giant, baby, diags, rescale, steps = lintrans_inputs(spec, s, lv, case.steps[0])
        lt = DeviceLinearTransform(dev, lv, 2.0 ** 30, spec.n // 2, giant, baby, diags)
        keys = {galois_element(spec, st): dev.upload_key_arrays(*key_digits(spec, s * 10 + st, lv), lv,
                                                                galois_element(spec, st), KEY_ID) for st in steps}
        x = ct([poly(spec, s, lv), poly(spec, s + 1, lv)])
        return digest(outs(lt.apply(x, keys, rescale=rescale)))
    if op == "pcmm_rlwe":
        U, K, c = pcmm_inputs(spec, s)
        cts = [ct([poly(spec, s + 10 + 2 * i, lv), poly(spec, s + 11 + 2 * i, lv)]) for i in range(U.shape[1] * c)]
        res = dev.pcmm_rlwe(GemmPlan(dev, U, 6), cts, c, K, 0.5, rescale=True)
        return digest([p for d in res for p in outs(d)])
    if op == "pcmm_msrlwe":
        from hemlp.gpu.msrlwe import DeviceMsCiphertext, pcmm_msrlwe

        U, K, k, present = msrlwe_inputs(spec, s)
        rows = [DeviceMsCiphertext(dev.upload_poly(poly(spec, s + 100 * i, lv)),
                                   [dev.upload_poly(poly(spec, s + 100 * i + 1 + j, lv)) for j in range(k)], lv, SCALE,
                                   spec.n // 2, 0, KEY_ID, spec.param_hash) if i in present else None
                for i in range(U.shape[1])]
        res = pcmm_msrlwe(dev, GemmPlan(dev, U, 6), rows, K, 0.5)
        return digest([dev.download_poly(p, lv + 1) for r in res for p in [r.a] + r.b])
    if op == "pcmm_mlwe":
        U, K, k = mlwe_inputs(spec, s)
        cts = [DeviceCiphertext([dev.upload_poly(poly(spec, s + 10 + 2 * i + j, lv)) for j in range(2)], lv, SCALE,
                                spec.n, 1, False, KEY_ID, spec.param_hash) for i in range(U.shape[1] // k)]
        keys = [dev.upload_key_arrays(*key_digits(spec, s * 10 + v, lv), lv, 0, KEY_ID) for v in range(k)]
        res = dev.pcmm_mlwe(GemmPlan(dev, U, 6), cts, k, K, 0.5, keys)
        return digest([p for d in res for p in outs(d)])
    a = ct([poly(spec, s, lv), poly(spec, s + 1, lv)])
    if op in ("add", "sub"):
        b = ct([poly(spec, s + 2, lv), poly(spec, s + 3, lv)])
        return digest(outs(dev.add(a, b) if op == "add" else dev.sub(a, b)))
    if op == "negate":
        return digest(outs(dev.negate(a)))
    if op in CONST_OPS:
        k, c, cs = CONST_ARGS
        r = (dev.mul_integer(a, k) if op == "mul_integer" else dev.mul_const(a, c, cs) if op == "mul_const"
             else dev.add_const_exact(a, c))
        return digest(outs(r))
    if op == "rescale":
        return digest(outs(dev.rescale(a)))
    b = ct([poly(spec, s + 2, lv), poly(spec, s + 3, lv)])
    if op == "tensor":
        return digest(outs(dev.mul(a, b)))
    if op in ("relinearize", "mul_relin_rescale"):
        rlk = dev.upload_key_arrays(*key_digits(spec, s, lv), lv, 0, KEY_ID)
        if op == "relinearize":
            c3 = ct([poly(spec, s, lv), poly(spec, s + 1, lv), poly(spec, s + 4, lv)])
            return digest(outs(dev.relinearize(c3, rlk)))
        return digest(outs(dev.mul(a, b, rlk, rescale=True)))
    if op in ("rotate", "rotate_hoisted"):
        gs = [galois_element(spec, st) for st in case.steps]
        keys = {g: dev.upload_key_arrays(*key_digits(spec, s * 10 + i, lv), lv, g, KEY_ID) for i, g in enumerate(gs)}
        if op == "rotate":
            return digest(outs(dev.apply_galois(a, gs[0], keys)))
        return digest([p for d in dev.rotate_hoisted(a, case.steps, keys) for p in outs(d)])
    raise ValueError(f"unknown case op {op!r}")


def check_gpu(table: dict, device: int = 0, cases=CASES) -> list:
    """[(case name, ok, device digest, CPU digest)] for every case whose preset the table has."""
    rows, devs = [], {}
    for case in cases:
        if case.preset not in table["specs"]:
            continue
        if case.preset not in devs:
            devs[case.preset] = CudaEvaluator(DeviceSpec.from_dict(table["specs"][case.preset]), device)
        want = table["cases"][case.name]
        got = compute_gpu(case, devs[case.preset])
        rows.append((case.name, got == want, got, want))
    return rows


__all__ = ["Case", "CASES", "TABLE", "build_table", "load_table", "check_gpu", "compute_cpu", "compute_gpu",
           "poly", "key_digits", "digest", "GemmPlan"]
