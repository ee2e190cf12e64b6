"""`hemlp compile model.pt`: a pickled nn.Module runs code when loaded, so the CLI asks for explicit trust."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _hemlp(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", "import sys; from hemlp.apps.cli import main; sys.exit(main())",
                           *map(str, args)], capture_output=True, text=True, env=env, timeout=600)


def test_pickled_module_needs_trust_pickle(tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3)).eval()
    torch.save(model, tmp_path / "m.pt")
    p = _hemlp("compile", tmp_path / "m.pt", "--input-shape", "12", "--insecure", "--preset", "test-N12-d6",
               "-o", tmp_path / "out")
    assert p.returncode != 0
    assert "--trust-pickle" in p.stderr and "run code" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "out").exists()
    p = _hemlp("compile", tmp_path / "m.pt", "--input-shape", "12", "--insecure", "--preset", "test-N12-d6",
               "--trust-pickle", "-o", tmp_path / "out")
    assert p.returncode == 0, p.stderr
