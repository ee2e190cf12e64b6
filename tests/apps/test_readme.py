"""The README's 10-line quickstart runs as printed (a new user pastes it): the code block under
"Quickstart: encrypted inference of a PyTorch model" is executed unchanged, then its result is checked."""
import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

README = Path(__file__).resolve().parents[2] / "README.md"


def _quickstart() -> str:
    text = README.read_text()
    head = text.index("## Quickstart: encrypted inference of a PyTorch model")
    m = re.search(r"```python\n(.*?)```", text[head:], re.S)
    assert m, "no python block under the quickstart heading"
    return m.group(1)


def test_readme_quickstart_runs_as_printed():
    code = _quickstart()
    assert len([ln for ln in code.splitlines() if ln.strip()]) <= 12
    torch.manual_seed(0)
    env: dict = {}
    exec(compile(code, str(README), "exec"), env)   # noqa: S102 - the documentation is the test input
    y, x, compiled = env["y"], env["x"], env["compiled"]
    assert y.shape == (256, 10)
    sim = compiled.simulate(x)                      # the same plan in plaintext
    assert np.max(np.abs(y - sim)) <= 1e-3 * max(1.0, np.max(np.abs(sim)))
    # against the PyTorch model itself: its ReLU is a degree-7 polynomial here, and the quickstart's model is
    # untrained (near-tied logits), so the outputs are compared as numbers, not by their argmax
    ref = env["model"](x).detach().numpy()
    assert np.corrcoef(y.ravel(), ref.ravel())[0, 1] > 0.95


def _python_blocks() -> list[tuple[str, str]]:
    """(heading, code) of every python block of the README, in order."""
    text, out = README.read_text(), []
    for m in re.finditer(r"```python\n(.*?)```", text, re.S):
        heading = re.findall(r"^#+ (.*)$", text[: m.start()], re.M)[-1]
        out.append((heading, m.group(1)))
    return out


def test_readme_snippets_use_only_names_they_or_earlier_snippets_define():
    """A snippet a user pastes after the ones above it has no undefined names (static: every loaded name is a
    builtin, imported or assigned by this block or an earlier one)."""
    import ast
    import builtins

    defined = set(dir(builtins))
    for heading, code in _python_blocks():
        tree = ast.parse(code)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        assert not used - defined, f"README block under {heading!r} uses undefined names {sorted(used - defined)}"


def test_readme_scheme_and_pcmm_snippet_runs_as_printed():
    """The block under "The scheme and the matrix layer directly" on its own, as printed (128-bit N14-d6)."""
    block = next(code for heading, code in _python_blocks() if heading.startswith("The scheme and the matrix layer"))
    env: dict = {}
    exec(compile(block, str(README), "exec"), env)   # noqa: S102 - the documentation is the test input
    ctx, np_ = env["ctx"], env["np"]
    assert env["Y"].shape == (10, ctx.slots) and env["y"].level == env["ct"].level - 1
    x = np_.linspace(-1, 1, ctx.slots)
    got = ctx.decrypt(env["y"], env["sk"])
    np_.testing.assert_allclose(got, np_.roll(x * x, -1), atol=1e-4)


@pytest.mark.slow
def test_readme_snippets_run_in_order(tmp_path, monkeypatch):
    """Every python block of the README, in order, in one namespace, as printed (128-bit presets: slow)."""
    monkeypatch.chdir(tmp_path)   # the client / server block writes model.hemlp, eval.keys, x.ct, y.ct here
    torch.manual_seed(0)
    env: dict = {}
    for heading, code in _python_blocks():
        exec(compile(code, f"README ({heading})", "exec"), env)   # noqa: S102
    assert (tmp_path / "y.ct").is_file() and env["Y"].shape[0] == 10
    # the client / server block saved the quickstart's model, and its client artefact is that model's
    assert env["server"].model_id == env["compiled"].model_id == env["client"].model_id
