"""Activations chosen for an agreement target on calibration data (hemlp.compiler.calibration), the fit's guard
band (hemlp.compiler.fit), typed errors for bad calibration data, and the client's range check before encrypting."""
import warnings

import numpy as np
import pytest
import torch

import hemlp
from hemlp.compiler.activations import RangeWarning
from hemlp.compiler.calibration import AgreementWarning, CalibrationWarning, top1
from hemlp.compiler.fit import fit
from hemlp.compiler.ir import exact_activation
from hemlp.errors import CalibrationError, InputRangeError, TargetUnreachableError

from .conftest import encrypted_vs_simulate


def _digits(n_train=1500, n_cal=1000, n_test=1000):
    from hemlp.datasets import load_mnist_sample

    tr = load_mnist_sample(train=True)
    te = load_mnist_sample(train=False)
    return tr.x[:n_train], tr.y[:n_train], tr.x[-n_cal:], te.x[:n_test], te.y[:n_test]


def _train(model, x, y, epochs=2, seed=0):
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = torch.as_tensor(x), torch.as_tensor(y)
    for _ in range(epochs):
        for i in range(0, len(x), 64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[i:i + 64]), yt[i:i + 64]).backward()
            opt.step()
    return model.eval()


def _ref(model, x):
    with torch.no_grad():
        return model(torch.as_tensor(x, dtype=torch.float32)).double().numpy()


# ---- fits
def test_minimax_beats_chebyshev_and_guard_band_bounds_the_outside():
    for d in (7, 15, 31):
        mm, ch = fit("relu", -1, 1, d, "minimax"), fit("relu", -1, 1, d, "chebyshev")
        assert mm.max_err < 0.5 * ch.max_err          # design: minimax ~3x better than interpolation for ReLU
    g = fit("relu", -1, 1, 31, "minimax", guard=0.5)
    assert g.max_err < 0.012 and (g.dom_lo, g.dom_hi) == (-2.0, 2.0)
    # 10 % beyond the calibrated range: the guarded fit stays accurate, the unguarded one does not
    u = np.linspace(1.0, 1.1, 101)
    for r, bound in ((g, 0.05), (fit("relu", -1, 1, 31, "minimax"), None)):
        p = np.polynomial.chebyshev.chebval(r.alpha * u + r.beta, r.coeffs)
        err = np.max(np.abs(p - exact_activation("relu", u)))
        if bound is not None:
            assert err < bound
        else:
            assert err > 0.1
    assert fit("relu", -1, 1, 31, "minimax", guard=0.5) is g        # cached


# ---- the default reaches the target on models no test tuned
class StridedCNN(torch.nn.Module):
    """The issue's shape: strided conv, SiLU, ReLU, average pooling, unmodified torch layers (14x14 digits)."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 4, 3, stride=2, padding=1)
        self.c2 = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.pool = torch.nn.AvgPool2d(2)
        self.fc = torch.nn.Linear(8 * 3 * 3, 10)

    def forward(self, x):
        x = torch.nn.functional.silu(self.c1(x))
        x = self.pool(torch.relu(self.c2(x)))
        return self.fc(x.flatten(1))


def _gelu_mlp():
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 64), torch.nn.GELU(), torch.nn.Linear(64, 10))


def _relu_mlp():
    torch.manual_seed(6)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32),
                               torch.nn.ReLU(), torch.nn.Linear(32, 10))


@pytest.mark.parametrize("make", [_relu_mlp, _gelu_mlp])
def test_default_reaches_99_percent_on_held_out_digits(make):
    xtr, ytr, cal, xte, _ = _digits()
    model = _train(make(), xtr, ytr)
    cm = hemlp.compile(model, cal[:1], calibration=cal, allow_insecure=True, batch_size=64)
    fitrep = cm.plan.info["activation_fit"]
    assert fitrep["searched"] and fitrep["agreement_simulate"] >= 0.99 and fitrep["samples"] == 1000
    assert all(a["degree"] in (3, 7, 15, 31, 63, 127) for a in fitrep["activations"])
    agree = np.mean(top1(cm.simulate(xte)) == top1(_ref(model, xte)))
    assert agree >= 0.99, agree                       # held out: not the calibration samples
    text = str(cm.plan)
    head, body = text.split("def forward")
    assert "top-1 agreement" in head and "max_err=" in body and body.count("agreement alone=") == len(
        fitrep["activations"])


def _pool2(x):
    return x.reshape(len(x), 1, 14, 2, 14, 2).mean(axis=(3, 5)).astype(np.float32)


@pytest.mark.slow
def test_strided_cnn_default_and_encrypted_vs_simulate():
    xtr, ytr, cal, xte, _ = _digits(n_train=2000)
    xtr, cal, xte = _pool2(xtr), _pool2(cal), _pool2(xte)
    model = _train(StridedCNN(), xtr, ytr)
    # the chosen depth (~11) is run on the insecure N = 2^12 chain: layout (A) at N = 2^16 would hold GBs per layer
    cm = hemlp.compile(model, cal[:1], calibration=cal, allow_insecure=True, batch_size=256, layout="batch",
                       preset="test-N12-d18")
    agree = np.mean(top1(cm.simulate(xte)) == top1(_ref(model, xte)))
    assert agree >= 0.99, (agree, str(cm.plan))
    y, ys = encrypted_vs_simulate(cm, xte[:256])
    assert np.mean(top1(y) == top1(ys)) >= 0.995


def test_search_prefers_lower_depth_for_a_looser_target():
    xtr, ytr, cal, _, _ = _digits()
    model = _train(_relu_mlp(), xtr, ytr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        tight = hemlp.compile(model, cal[:1], calibration=cal, allow_insecure=True, target_agreement=0.99,
                              server_memory=None)         # compiled to compare plans, never run
        loose = hemlp.compile(model, cal[:1], calibration=cal, allow_insecure=True, target_agreement=0.8)
    assert loose.plan.info["depth"] < tight.plan.info["depth"]
    assert loose.plan.info["activation_fit"]["agreement"] >= 0.9


def test_fixed_degree_still_overrides_and_reports():
    xtr, ytr, cal, _, _ = _digits()
    model = _train(_relu_mlp(), xtr, ytr)
    with pytest.warns(AgreementWarning, match="below the target"):
        cm = hemlp.compile(model, cal[:1], calibration=cal, allow_insecure=True, activation_degree=3)
    assert [a["degree"] for a in cm.plan.info["activation_fit"]["activations"]] == [3, 3]
    assert not cm.plan.info["activation_fit"]["searched"]


def test_small_calibration_warns_not_certified():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.SiLU(), torch.nn.Linear(8, 3)).eval()
    x = np.random.default_rng(0).normal(size=(64, 6))
    with pytest.warns(CalibrationWarning, match="at least 1000"):
        cm = hemlp.compile(model, x, allow_insecure=True)
    assert "not certified" in str(cm.plan)


# ---- bad calibration data: typed errors naming the fix
def _tiny():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3)).eval()


def test_wrong_shape_calibration():
    x = np.random.default_rng(0).normal(size=(8, 4))
    with pytest.raises(CalibrationError, match=r"shape \(10, 5\).*\(n, 4\)"):
        hemlp.compile(_tiny(), x, calibration=np.zeros((10, 5)), allow_insecure=True)
    with pytest.raises(CalibrationError, match="without its batch dimension"):
        hemlp.compile(_tiny(), x, calibration=np.ones(4), allow_insecure=True)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_calibration(bad):
    cal = np.random.default_rng(0).normal(size=(20, 4))
    cal[7, 2] = bad
    with pytest.raises(CalibrationError, match="NaN or infinity in 1 of 20 samples.*sample 7"):
        hemlp.compile(_tiny(), cal[:1], calibration=cal, allow_insecure=True)


def test_shape_only_compile_needs_calibration():
    with pytest.raises(CalibrationError, match="calibration=X"):
        hemlp.compile(_tiny(), np.zeros((1, 4)), allow_insecure=True)
    # a model whose activations need no range compiles from the shape alone
    torch.manual_seed(0)

    class Sq(torch.nn.Module):
        def forward(self, x):
            return x * x

    sq = torch.nn.Sequential(torch.nn.Linear(4, 6), Sq(), torch.nn.Linear(6, 3)).eval()
    assert "activation_fit" not in hemlp.compile(sq, np.zeros((1, 4)), allow_insecure=True).plan.info


def test_unmeetable_target():
    xtr, ytr, cal, _, _ = _digits()
    model = _train(_relu_mlp(), xtr, ytr)
    with pytest.raises(TargetUnreachableError, match=r"best is .*%.*Lower target_agreement"):
        hemlp.compile(model, cal[:1], calibration=cal, allow_insecure=True, preset="test-N12-d18",
                      target_agreement=1.0)     # 1 000 / 1 000 bounds the agreement at 99.77 % only
    with pytest.raises(TargetUnreachableError, match=r"degree-3 activations need 7 levels, more than the 6") as e:
        hemlp.compile(model, cal[:1], calibration=cal, allow_insecure=True, preset="test-N12-d6")
    assert "bootstrap=True" in str(e.value)   # the option that solves a network deeper than every preset
    with pytest.raises(CalibrationError, match="target_agreement=1.5"):
        hemlp.compile(model, cal[:1], calibration=cal, allow_insecure=True, target_agreement=1.5)


# ---- ranges at run time: simulate counts and warns, the client refuses before encrypting
def _pool4(x):
    return x.reshape(len(x), 1, 7, 4, 7, 4).mean(axis=(3, 5))


@pytest.fixture(scope="module")
def digit_mlp():
    """7x7 digits (49 ciphertexts in layout A) through a trained ReLU MLP, on an explicit small test preset."""
    xtr, ytr, cal, xte, _ = _digits()
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(49, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    model = _train(model, _pool4(xtr).astype(np.float32), ytr)
    cal = _pool4(cal)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AgreementWarning)
        cm = hemlp.compile(model, cal[:1], calibration=cal, allow_insecure=True, batch_size=16, layout="batch",
                           preset="test-N12-d18")
    return cm, _pool4(xte[:16])


@pytest.mark.parametrize("transform", [lambda x: x * 100, lambda x: np.round(x * 255), lambda x: x * -10],
                         ids=["x100", "uint8", "x-10"])
def test_out_of_range_inputs_never_decrypt_silently(digit_mlp, transform):
    cm, x = digit_mlp
    bad = transform(x)
    with pytest.warns(RangeWarning, match="garbage"):
        cm.simulate(bad)
    rep = cm.last_range_report
    assert any(v["beyond_domain"] > 0 for v in rep.values())
    sk, keys = cm.keygen()
    with pytest.raises(InputRangeError, match=r"activation .* beyond its polynomial's domain.*on_range='warn'"):
        cm.encrypt(bad, sk)
    with pytest.warns(RangeWarning, match="beyond its polynomial's domain"):
        cm.encrypt(bad, sk, on_range="warn")            # the explicit opt-in


def test_in_range_inputs_pass_silently(digit_mlp):
    cm, x = digit_mlp
    with warnings.catch_warnings():
        warnings.simplefilter("error", RangeWarning)
        cm.simulate(x)
        sk, keys = cm.keygen()
        y = cm.decrypt(cm.run(cm.encrypt(x, sk), keys), sk)
    assert all(v["beyond_domain"] == 0 for v in cm.last_range_report.values())
    assert np.mean(top1(y) == top1(cm.simulate(x))) == 1.0


def test_loaded_model_checks_ranges_too(digit_mlp, tmp_path):
    cm, x = digit_mlp
    cm.save(tmp_path / "m")
    loaded = hemlp.load(tmp_path / "m", allow_insecure=True)
    sk, _ = loaded.keygen()
    with pytest.raises(InputRangeError):
        loaded.encrypt(x * 100, sk)


# ---- the CLI: a shape-only compile of a model with ranged activations is refused, --calibration works
def test_cli_compile_needs_calibration_for_relu(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("onnx")
    model = _tiny()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, 4),), str(tmp_path / "m.onnx"), dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}})
    np.save(tmp_path / "cal.npy", np.random.default_rng(0).normal(size=(300, 4)))
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo) + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def cli(*args):
        return subprocess.run([sys.executable, "-c", "import sys; from hemlp.apps.cli import main; sys.exit(main())",
                               *map(str, args)], capture_output=True, text=True, env=env, timeout=600)

    p = cli("compile", tmp_path / "m.onnx", "--input-shape", "4", "--insecure", "-o", tmp_path / "a")
    assert p.returncode != 0 and "--calibration" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "a").exists()
    p = cli("compile", tmp_path / "m.onnx", "--calibration", tmp_path / "cal.npy", "--insecure", "-o", tmp_path / "b")
    assert p.returncode == 0, p.stderr
    assert "top-1 agreement" in p.stdout + p.stderr and (tmp_path / "b" / "plan.json").is_file()
    np.save(tmp_path / "bad.npy", np.zeros((10, 5)))
    p = cli("compile", tmp_path / "m.onnx", "--calibration", tmp_path / "bad.npy", "--insecure", "-o", tmp_path / "c")
    # the model's frontend sees the calibration's first sample: its error names the feature mismatch
    assert p.returncode != 0 and "expects 4 features, the input has 5" in p.stderr and "Traceback" not in p.stderr


def test_agreement_bound_is_clopper_pearson_at_any_sample_count():
    """The lower bound equals the Clopper-Pearson bound from mpmath's regularised incomplete beta where that
    converges (n = 100, 1 000), and stays finite and ordered at calibration sets of 8 000 and 60 000 samples, where
    the incomplete beta failed to converge and compile() crashed."""
    import mpmath

    from hemlp.compiler.calibration import CONFIDENCE, agreement_bound

    def reference(a, n):
        lo, hi = 0.0, 1.0
        for _ in range(50):
            mid = (lo + hi) / 2
            if mpmath.betainc(a, n - a + 1, 0, mid, regularized=True) > 1 - CONFIDENCE:
                hi = mid
            else:
                lo = mid
        return lo

    for a, n in ((95, 100), (990, 1000), (1000, 1000)):
        assert abs(agreement_bound(a, n) - reference(a, n)) < 1e-9
    big = [agreement_bound(a, 8000) for a in (7900, 7990, 8000)]
    assert 0.98 < big[0] < big[1] < big[2] < 1.0 and big[1] < 7990 / 8000
    assert 0.9999 < agreement_bound(60000, 60000) < 1.0
    assert agreement_bound(0, 10) == 0.0
