import pytest

from tests.conftest import make_ctx


class Keys:
    def __init__(self, ctx):
        self.ctx = ctx
        self.sk, self.pk = ctx.keygen()
        self.rlk = ctx.relin_key(self.sk)


@pytest.fixture(scope="session")
def t12():
    """Insecure Set T (N=2^12, 4 q-primes, alpha=2: two key-switching digits) with keys."""
    return Keys(make_ctx("test-N12"))


@pytest.fixture(scope="session")
def t10():
    return Keys(make_ctx("test-N10"))
