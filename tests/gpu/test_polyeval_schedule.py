"""hemlp.gpu.polyeval follows the CPU core's polynomial schedule step for step.

The device port is run here on a stand-in evaluator whose every operation is the CPU core's (or exact Python-integer
arithmetic for the per-limb constant products): if the port issued one operation differently from
csrc/boot/polyeval.cpp (another power, scale, constant or order), its outputs would differ from the core's
poly_evaluate words, which the golden table holds. On a GPU machine test_gpu_bit_exact checks the same cases on the
device itself.
"""
from dataclasses import dataclass

import numpy as np
import pytest

from hemlp import _core
from hemlp.gpu import golden
from hemlp.gpu.device import DeviceCiphertext, DeviceSpec
from hemlp.gpu.polyeval import evaluate_polynomial, poly_depth


@dataclass
class Buf:
    arr: np.ndarray


class CoreBackedEvaluator:
    """The CudaEvaluator operations polyeval uses, each done by the CPU core on imported ciphertexts."""

    def __init__(self, ctx, spec):
        self.e, self.spec = ctx.native, spec

    def native(self, d):
        return self.e.import_ciphertext([p.arr[:d.level + 1] for p in d.polys], d.level, d.scale, d.slots,
                                        d.encoding, d.is_complex, d.key_id, None)

    def wrap(self, o, like):
        return DeviceCiphertext([Buf(o.poly(j)) for j in range(o.size)], o.level, o.scale, o.slots, o.encoding,
                                o.is_complex, o.key_id, like.param_hash)

    def mul(self, a, b, rlk=None, rescale=False):
        if rlk is not None and rescale:
            return self.wrap(self.e.mul_relin_rescale(self.native(a), self.native(b), rlk), a)
        r = self.wrap(self.e.mul(self.native(a), self.native(b), rlk), a)
        return self.rescale(r) if rescale else r

    def rescale(self, a):
        return self.wrap(self.e.rescale(self.native(a)), a)

    def add(self, a, b):
        return self.wrap(self.e.add(self.native(a), self.native(b)), a)

    def sub(self, a, b):
        return self.wrap(self.e.sub(self.native(a), self.native(b)), a)

    def mul_const(self, a, c, s):
        return self.wrap(_core.mul_const(self.e, self.native(a), c, s), a)

    def add_const_exact(self, a, c):
        return self.wrap(_core.add_const_exact(self.e, self.native(a), c), a)

    def mul_integer(self, a, k):
        return self.wrap(self.e.mul_integer(self.native(a), k), a)

    def drop_level(self, a, level):
        return self.wrap(self.e.drop_to_level(self.native(a), level), a)

    def with_scale(self, a, scale):
        return DeviceCiphertext(list(a.polys), a.level, float(scale), a.slots, a.encoding, a.is_complex, a.key_id,
                                a.param_hash)

    def _q(self, level):
        return np.array([self.spec.q[k] for k in range(level + 1)], dtype=object)[:, None]

    def scalar_multiply(self, buf, level, w):
        x = buf.arr[:level + 1].astype(object)
        return Buf(((x * np.array(w, dtype=object)[:, None]) % self._q(level)).astype(np.uint64))

    def scalar_multiply_add(self, acc, term, level, w):
        t = term.arr[:level + 1].astype(object) * np.array(w, dtype=object)[:, None]
        acc.arr = ((acc.arr.astype(object) + t) % self._q(level)).astype(np.uint64)

    def scalar_add(self, buf, level, w):
        x = buf.arr[:level + 1].astype(object) + np.array(w, dtype=object)[:, None]
        return Buf((x % self._q(level)).astype(np.uint64))

    def check_key(self, *args):
        pass


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.slow] if c.preset == "N16-boot" else [])
                                  for c in golden.CASES if c.op == "polyeval"], ids=lambda c: c.name)
def test_the_port_issues_the_core_s_operations(case):
    ctx = golden.cpu_context(case.preset)
    spec = DeviceSpec.from_context(ctx)
    lv = golden.level_of(spec, case)
    coeffs, basis = golden.polyeval_inputs(spec, case.seed, lv, case.steps[0])
    rlk = ctx.native.switch_key_from_arrays(*golden.key_digits(spec, case.seed, lv), 0, lv, golden.KEY_ID)
    x = DeviceCiphertext([Buf(golden.poly(spec, case.seed + j, lv)) for j in range(2)], lv, golden.SCALE,
                         spec.n // 2, 0, False, golden.KEY_ID, spec.param_hash)
    out = evaluate_polynomial(CoreBackedEvaluator(ctx, spec), x, coeffs, basis, rlk, golden.SCALE)
    assert out.level == lv - poly_depth(len(coeffs) - 1) and out.scale == golden.SCALE
    assert golden.digest([p.arr for p in out.polys]) == golden.load_table()["cases"][case.name]
