"""hemlp.gpu.polyeval follows the CPU core's polynomial schedule step for step.

The device port is run here on a stand-in evaluator whose every operation is the CPU core's (or exact Python-integer
arithmetic for the per-limb constant products): if the port issued one operation differently from
csrc/boot/polyeval.cpp (another power, scale, constant or order), its outputs would differ from the core's
poly_evaluate words, which the golden table holds. On a GPU machine test_gpu_bit_exact checks the same cases on the
device itself.
"""
import pytest

from hemlp.gpu import golden
from hemlp.gpu.device import DeviceCiphertext, DeviceSpec
from hemlp.gpu.polyeval import evaluate_polynomial, poly_depth
from tests.gpu.core_backed import Buf, CoreBackedEvaluator


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
