"""The bootstrapped test model of the key-file and streamed-input tests."""
import warnings

import numpy as np

import hemlp
from tests.compiler.conftest import mlp


def boot_mlp(x_range: float) -> tuple:
    """(compiled, inputs): a layout (A) MLP 6-8-8-3 at test-N12-boot with one refresh point, S2C-first batched
    k = 2 (the N16 job's pipeline), compiled for 2 048 inputs drawn in [-x_range, x_range]."""
    rng = np.random.default_rng(17)
    cal, x = rng.uniform(-1, 1, (48, 6)), rng.uniform(-x_range, x_range, (2048, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")             # insecure test preset
        cm = hemlp.compile(mlp(dims=(6, 8, 8, 3), seed=5), cal, batch_size=2048, bootstrap=True, layout="batch",
                           allow_insecure=True, mambo=False, preset="test-N12-boot", batch_bootstrap=2)
    return cm, x
