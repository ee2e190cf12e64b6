"""Small evaluation-key sets at the insecure test-N10 preset, for tests of key files (staging, pruning)."""
import warnings

from hemlp.fhe import Context
from hemlp.runtime.artifacts import EvalKeys


def eval_key_sets(model_id: str, count: int, rotations: list) -> tuple:
    """(context, [EvalKeys]): `count` key sets of fresh secret keys, each a relinearisation key and `rotations`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")             # insecure test preset
        ctx = Context("test-N10", allow_insecure=True)
    sets = []
    for _ in range(count):
        sk, _ = ctx.keygen()
        sets.append(EvalKeys(model_id, ctx.relin_key(sk), ctx.rotation_keys(sk, rotations)))
    return ctx, sets
