import os
import warnings

import numpy as np
import pytest

# The test processes share the cores with each other and with other jobs: sleeping OpenMP waiters (see
# hemlp.apps.cli.main). Set before any test loads the native core.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Plans do not depend on the machine the suite runs on: the planner prices them with the packaged avx512 table (what
# the checkout's bench/*.json measured; hemlp.planner.cost_model), subprocesses included, unless a test sets another.
os.environ.setdefault("HEMLP_COST_PROFILE", "packaged:avx512")
# Every compile pass lints the steps it hands on (hemlp.step_ops.lint_pass): a broken pass fails where it happens.
os.environ.setdefault("HEMLP_LINT_STEPS", "1")


def bits(err) -> float:
    """Precision in bits: -log2(max abs error)."""
    e = float(np.max(np.abs(err)))
    return float("inf") if e == 0 else -np.log2(e)


def switch_key_bytes(ctx, level: int) -> int:
    """Bytes of one switching key for `level`: num_digits(level) digits of (level + 1 + |P|) limbs of
    N 64-bit words (the a-halves travel as seeds)."""
    digits = -(-(level + 1) // ctx.params.alpha)
    return digits * (level + 1 + len(ctx.params.p)) * ctx.N * 8


@pytest.fixture(scope="session", autouse=True)
def exact_decryption_for_precision_tests():
    """The suite measures the precision of homomorphic operations, so in-process contexts decrypt exactly by
    default (noise="none"). Production contexts add IND-CPA-D noise ("standard"): tests/fhe/test_decrypt_noise.py
    checks that default in a fresh interpreter, and every subprocess test (CLI, benchmarks) runs with it."""
    from hemlp import fhe

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fhe.UnsafeDecryptionWarning)
        fhe.set_default_decrypt_noise("none")
    yield
    fhe.set_default_decrypt_noise("standard")


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)


def make_ctx(name="test-N12"):
    from hemlp import fhe

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fhe.Context(name, allow_insecure=True)
