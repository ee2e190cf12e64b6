"""Step metadata is typed: one dataclass per op family (hemlp.step_ops.INFO), its fields documented, a name the family
does not declare refused; the same fields read as a mapping of the set ones (the saved plan.json holds exactly them,
in the order they were set), and a saved model loads back with the same typed metadata."""
import json
import warnings

import numpy as np
import pytest
import torch

import hemlp
from hemlp.compiler.lower import Step
from hemlp.errors import SerializationError
from hemlp.step_ops import INFO, MatmulInfo, PcmmInfo, RefreshInfo, StepInfo, StepOp, step_info


def test_every_step_op_has_a_metadata_class():
    assert set(INFO) == set(StepOp)
    assert all(issubclass(c, StepInfo) for c in INFO.values())
    assert INFO[StepOp.PCMM] is PcmmInfo and INFO[StepOp.MAMBO] is INFO[StepOp.BOOTSTRAP] is RefreshInfo
    assert StepInfo.names() == frozenset()                  # the ops without metadata


def test_fields_read_as_attributes_and_as_the_mapping_of_the_set_ones():
    s = Step(StepOp.BOOTSTRAP, "b", ["a"], 4, info=dict(scale_factor=8, kind="single", mambo_seconds=None))
    info = s.info
    assert isinstance(info, RefreshInfo) and info.scale_factor == 8 and info.order is None
    assert info.get("order", "cts_first") == "cts_first" and "order" not in info
    assert "mambo_seconds" in info and info["mambo_seconds"] is None          # set to None is set
    info["k"] = 2
    info.order = "s2c_first"
    assert list(info) == ["scale_factor", "kind", "mambo_seconds", "k", "order"]
    assert info == dict(scale_factor=8, kind="single", mambo_seconds=None, k=2, order="s2c_first")
    assert s.meta()["info"] == info.to_json() == dict(info)
    del info["k"]
    assert "k" not in info and info.k is None
    with pytest.raises(KeyError, match="RefreshInfo has no field 'scale'.*scale_factor"):
        info["scale"] = 2
    with pytest.raises(AttributeError, match="no field 'scale'"):
        info.scale = 2


def test_the_constructor_sets_its_keywords_in_the_order_given_and_copy_keeps_it():
    # the saved plan's keys follow the order fields are set in, so a typed constructor must keep the caller's
    info = RefreshInfo(seed=3, value="v", kind=None, k=2)
    assert list(info) == ["seed", "value", "k"] and info.kind is None              # None given: not set
    assert list(RefreshInfo("v", "b")) == ["value", "before"] and list(RefreshInfo()) == []
    info.batched_seconds = None                                                     # set to None is set
    dup = info.copy()
    assert type(dup) is RefreshInfo and list(dup) == ["seed", "value", "k", "batched_seconds"] and dup == info
    dup.k = 4
    assert info.k == 2


def test_a_step_converts_its_metadata_to_its_op_family():
    U = np.eye(4)
    conv = Step(StepOp.PCMM, "c", ["x"], 4, U=U, info=dict(in_shape=[1, 2, 2], out_shape=[1, 2, 2]))
    assert isinstance(conv.info, PcmmInfo) and conv.info.in_shape == [1, 2, 2]
    assert isinstance(Step(StepOp.MATMUL, "m", ["a", "b"], 4, info=dict(a_shape=[2, 2], b_shape=[2, 2])).info,
                      MatmulInfo)
    assert type(Step(StepOp.ALIAS, "v", ["x"], 4).info) is StepInfo
    with pytest.raises(KeyError, match="StepInfo has no field 'in_shape'"):
        step_info(StepOp.ALIAS, conv.info)
    mambo = Step(StepOp.MAMBO, "m", ["x"], 4, U=U, info=dict(RefreshInfo.of(dict(scale_factor=2)), pcmm="c"))
    assert mambo.info.pcmm == "c" and mambo.info.scale_factor == 2


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)
        self.fc = torch.nn.Linear(2 * 4 * 4, 8)
        self.out = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = self.fc(self.conv(x).flatten(1)) ** 2
        return self.out((y.view(-1, 2, 4) @ y.view(-1, 4, 2)).reshape(-1, 4))


def _compiled(tmp_path):
    x = np.random.default_rng(0).uniform(-1, 1, size=(8, 1, 4, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(_Net().eval(), x, allow_insecure=True, server_memory=None)
    cm.save(tmp_path / "m")
    return cm


def test_a_saved_model_loads_back_with_the_same_typed_metadata(tmp_path):
    cm = _compiled(tmp_path)
    back = hemlp.load(tmp_path / "m", allow_insecure=True)
    assert [(type(s.info), dict(s.info)) for s in back.steps] == [(type(s.info), dict(s.info)) for s in cm.steps]
    saved = json.loads((tmp_path / "m" / "plan.json").read_text())["steps"]
    assert [m["info"] for m in saved] == [s.info.to_json() for s in cm.steps]
    assert {type(s.info) for s in cm.steps} >= {PcmmInfo, MatmulInfo, StepInfo}
    conv = next(s for s in back.steps if s.index is not None)
    assert conv.info.in_shape == [1, 4, 4] and conv.info.out_shape == [2, 4, 4]


def test_a_plan_with_metadata_this_version_does_not_know_is_refused_by_name(tmp_path):
    _compiled(tmp_path)
    path = tmp_path / "m" / "plan.json"
    meta = json.loads(path.read_text())
    meta["steps"][1]["info"]["from_the_future"] = 1
    path.write_text(json.dumps(meta))
    with pytest.raises(SerializationError, match="no field 'from_the_future'.*another hemlp version"):
        hemlp.load(tmp_path / "m", allow_insecure=True)
