"""The plaintext model of a placed bootstrap step (layout A), so that ``simulate`` stays the oracle of the
encrypted run (issue #18, item 1):

* the EvalMod input range: the encrypted step divides every ciphertext by its power-of-two ``scale_factor``
  c (a re-tag of the scale, free) and bootstrapping needs the coefficients of each ciphertext's slot
  vector, in units of the scale, within 1 (hemlp.bootstrap.max_coefficient, the quantity
  Bootstrapper.check_input_range bounds); beyond it the result loses precision and then wraps around,
  so the simulation raises EncodingError naming the step and the fix instead of returning numbers the
  encrypted run would not give;
* the precision loss: bootstrapping returns the slots with an error of about 2^-noise_bits in units of
  the scale (measured: bench/boot_*.json), multiplied by c when the result is multiplied back by c; the
  simulation adds Gaussian noise of that size, seeded per step (the same numbers on every call).

A step: op "bootstrap", info = {"scale_factor": c, "noise_bits": b, "seed": s, "slots": n, "order": ...}.

The S2C-first order (batched bootstraps and MaMBo, hemlp.bootstrap.mambo) feeds EvalMod the slot values themselves
(SlotToCoeff runs first), so its range is |x / c| <= 1 in every slot instead of the coefficient bound. A MaMBo
step (op "mambo": the PCMM fused into the refresh of its output) is modelled as what it replaces: the PCMM with the
quantised weights, the refresh of U·X (range-checked against its c, error 2^-noise_bits x c, the bits measured for
pcmm_bootstrap), then the bias added exactly.

Layout (P) (``simulate_packed_bootstrap``): a packed value's ciphertext holds a slot vector that repeats every n
slots and is refreshed by an n-slot (sparse) bootstrap: the range check is on the coefficients of its first n slots
(what Bootstrapper.check_input_range sees), and the error, drawn for those n slots, repeats with them.
"""
from __future__ import annotations

import numpy as np

from hemlp.bootstrap import max_coefficient
from hemlp.errors import EncodingError
from hemlp.pcmm import quantize

__all__ = ["simulate_bootstrap", "simulate_mambo", "input_range", "simulate_packed_bootstrap"]


def input_range(x: np.ndarray, slots: int) -> float:
    """Largest coefficient (units of the scale) over the ciphertexts of a rows matrix (features x batch) laid
    out in layout (A): row r, chunk j holds x[r, j*slots:(j+1)*slots], zero-padded."""
    X = np.asarray(x, dtype=np.float64)
    worst = 0.0
    for j in range(0, max(1, X.shape[1]), slots):
        block = X[:, j: j + slots]
        for row in block:
            z = np.zeros(slots)
            z[: row.size] = row
            worst = max(worst, max_coefficient(z))
    return worst


def simulate_bootstrap(step, x: np.ndarray) -> np.ndarray:
    """x (rows matrix) after the bootstrap step: range-checked, with the bootstrap's error added."""
    info = step.info
    c = float(info.scale_factor)
    if info.order == "s2c_first":
        m = float(np.max(np.abs(x))) / c if x.size else 0.0
        what = "largest value"
        need = "values <= 1 in the S2C-first order"
    else:
        m = input_range(x / c, int(info.slots))
        what = "largest coefficient"
        need = "coefficients <= 1 in units of the scale"
    if m > 1.0:
        raise EncodingError(
            f"bootstrap {step.out!r}: its input's {what} is {m * c:.4g}, above the {c:g} the plan "
            f"divides by (EvalMod needs {need}, else the result wraps around). "
            f"The input batch is outside the range the model was compiled for: recompile with a representative "
            f"example input (or a larger activation_margin)")
    rng = np.random.default_rng(int(info.seed))
    return x + rng.normal(0.0, c * 2.0 ** -float(info.noise_bits), size=x.shape)


def simulate_mambo(step, x: np.ndarray, weight_bits: int) -> np.ndarray:
    """x (the PCMM's input rows) after a MaMBo step: U·x with the quantised weights, refreshed like an S2C-first
    bootstrap of U·x (range check and error, see simulate_bootstrap), then + bias."""
    Uq, delta = quantize(step.U, weight_bits)
    y = simulate_bootstrap(step, (Uq / delta) @ x)
    return y if step.bias is None else y + step.bias[:, None]


def simulate_packed_bootstrap(step, vecs: list, n: int) -> list:
    """Layout (P): slot vectors (each repeating every n slots) after the bootstrap step, refreshed with n slots."""
    info = step.info
    c = float(info.scale_factor)
    rng = np.random.default_rng(int(info.seed))
    out = []
    for v in vecs:
        z = np.asarray(v, dtype=np.float64)[:n]
        reps = v.size // n
        if not np.allclose(np.tile(z, reps), v, rtol=0, atol=1e-9 * (1 + float(np.max(np.abs(v))))):
            raise AssertionError(f"bootstrap {step.out!r}: the packed value does not repeat every {n} slots")
        m = max_coefficient(z / c)
        if m > 1.0:
            raise EncodingError(
                f"bootstrap {step.out!r}: its input's largest coefficient is {m * c:.4g}, above the {c:g} the plan "
                f"divides by (EvalMod needs coefficients <= 1 in units of the scale, else the result wraps around). "
                f"The input is outside the range the model was compiled for: recompile with a representative "
                f"example input (or a larger activation_margin)")
        out.append(np.tile(z + rng.normal(0.0, c * 2.0 ** -float(info.noise_bits), size=n), reps))
    return out
