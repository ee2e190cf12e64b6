"""scripts/resnet20_report.py --estimate: the plan's estimate by kind beside a run's measured seconds by kind, in
the report's JSON, refused for another plan than the one measured."""
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import hemlp

torch = pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from resnet20_report import record_estimate, step_summary  # noqa: E402


@pytest.fixture(scope="module")
def compiled():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.SiLU(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 3))
    xc = np.random.default_rng(11).uniform(-1, 1, (48, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hemlp.compile(model, xc, batch_size=2, bootstrap=True, allow_insecure=True, activation_degree=3,
                             layout="packed", preset="test-N10-boot")


def test_the_estimate_by_kind_goes_beside_the_measured_median(compiled, tmp_path):
    est = step_summary(compiled.layout_impl.step_estimates())
    assert est["bootstrap"] > 0 and sum(est.values()) > est["bootstrap"]
    runs = [dict(index=i, step_seconds={"bootstrap": 2.0 * (i + 1), "matvec": 1.0, "other": 0.5}) for i in range(3)]
    doc = dict(model_id=compiled.model_id, encrypted=runs + [dict(index=3)])      # an image without step seconds
    path = tmp_path / "report.json"
    path.write_text(json.dumps(doc))
    machine = dict(git=dict(commit="abc1234def"), cpu=dict(model="Test CPU"))
    assert record_estimate(path, doc, compiled, machine) == 0
    [e] = json.loads(path.read_text())["estimates"]
    assert e["estimated"] == pytest.approx(est) and e["estimated_total"] == pytest.approx(sum(est.values()))
    assert e["measured_median"] == {"bootstrap": 4.0, "matvec": 1.0, "other": 0.5}
    assert e["measured_images"] == [0, 1, 2] and e["measured_median_total"] == 5.5
    assert e["measured_over_estimated"]["bootstrap"] == pytest.approx(4.0 / est["bootstrap"])
    assert e["commit"] == "abc1234" and e["cpu"] == "Test CPU" and e["cost_profile"]
    # again under the same cost profile: the entry is replaced, not appended
    record_estimate(path, json.loads(path.read_text()), compiled, machine)
    assert len(json.loads(path.read_text())["estimates"]) == 1
    with pytest.raises(SystemExit, match="another plan"):
        record_estimate(path, dict(doc, model_id="0" * 16), compiled, machine)
    with pytest.raises(SystemExit, match="no encrypted image"):
        record_estimate(path, dict(doc, encrypted=[dict(index=0)]), compiled, machine)
