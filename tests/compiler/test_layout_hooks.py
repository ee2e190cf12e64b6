"""compile() decides per layout through Layout class attributes only: which layouts run the last linear layer
unrescaled (final_rescale=False) and which have a program of their own (compiled.<layout name>)."""
import pytest

from hemlp import layouts
from hemlp.compiled_model import CompiledModel
from hemlp.errors import UnsupportedError
from hemlp.layouts.batch import Batch


class Toy(Batch):
    # a second layout that can run the final layer unrescaled: final_rescale=False must offer it too
    name, label = "toy", "(T)"


def test_unrescaled_candidates_follow_the_hook(monkeypatch):
    assert layouts.unrescaled_candidates("auto", False) == [Batch]
    with pytest.raises(UnsupportedError, match=r"final_rescale=False plans layout \(A\) only \(layout='batch'\)"):
        layouts.unrescaled_candidates("packed", False)
    with pytest.raises(UnsupportedError, match="final_rescale=False plans layout"):
        layouts.unrescaled_candidates("auto", True)
    monkeypatch.setitem(layouts.LAYOUTS, "toy", Toy)
    assert layouts.unrescaled_candidates("auto", False) == [Batch, Toy]
    assert layouts.unrescaled_candidates("toy", False) == [Toy]
    with pytest.raises(UnsupportedError, match=r"layout \(A\), layout \(T\) only \(layout='batch' or layout='toy'\)"):
        layouts.unrescaled_candidates("mlwe", False)


def test_own_program_hook():
    # layout (A)'s steps are its program: compiled.batch is no attribute, the other layouts' names are
    assert not Batch.own_program and Batch.unrescaled_final
    assert all(c.own_program for n, c in layouts.LAYOUTS.items() if n != "batch")
    assert [n for n, c in layouts.LAYOUTS.items() if c.unrescaled_final] == ["batch"]
    cm = object.__new__(CompiledModel)      # only __getattr__'s view of it: the layout's name
    cm.__dict__["layout"] = "batch"
    assert cm.packed is None and cm.mlwe is None and cm.blocked is None
    with pytest.raises(AttributeError, match="batch"):
        cm.batch
