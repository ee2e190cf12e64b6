"""The Python package's import graph, read from the source (AST, nothing imported).

Rules (docs/design/architecture.md, "Rules of thumb"): no import cycle between hemlp's modules, counting the imports
inside functions too (a function-level import is how a cycle hides); and no private name used across modules — neither
``from hemlp.x import _name`` nor ``module._name`` nor ``obj._name`` where ``_name`` is not defined in the module
that uses it (an attribute of another module's class). ``hemlp._core`` (the native extension module, named so by
pybind11 convention) is the one private-looking module name that may be imported.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "hemlp"
ALLOWED_PRIVATE_MODULES = {"hemlp._core"}

#: modules already redesigned (issue #15): held to every rule now, whatever the rest of the tree does
CLEAN = ("hemlp", "hemlp.model", "hemlp.compiled_model", "hemlp.artefact", "hemlp.options", "hemlp.run_options",
         "hemlp.fhe", "hemlp.pcmm", "hemlp.threads", "hemlp.errors", "hemlp.apps.cli",
         "hemlp.apps.demo", "hemlp.layouts", "hemlp.compiler", "hemlp.planner", "hemlp.runtime.local")

#: The layers (docs/design/architecture.md, "Data flow": data flows one way, each layer uses only the ones below it).
#: A module under a key may import, at module or function level, only hemlp modules under the listed prefixes or the
#: foundation (the most specific key applies; hemlp._core is always allowed). Keys not listed (layouts, model, hemlp
#: itself) sit above all of these; apps is the top and no library module imports it
#: (test_nothing_in_the_library_imports_apps_or_baselines).
LAYERS = {
    "hemlp.fhe": ("hemlp.fhe",),                                               # the scheme: nothing above it
    "hemlp.he": ("hemlp.fhe", "hemlp.he"),                                     # building blocks on the scheme
    "hemlp.pcmm": ("hemlp.fhe", "hemlp.pcmm"),                                 # PCMM on the scheme
    "hemlp.bootstrap": ("hemlp.fhe", "hemlp.he", "hemlp.pcmm", "hemlp.bootstrap"),
    "hemlp.baselines": ("hemlp.fhe", "hemlp.he", "hemlp.baselines"),           # comparison code only
    "hemlp.planner": ("hemlp.planner",),                                       # pure Python: no scheme, no Ray
    "hemlp.gpu": ("hemlp.fhe", "hemlp.he", "hemlp.pcmm", "hemlp.bootstrap", "hemlp.gpu"),  # the CUDA backend
    # a compiled model's run on the GPU: layout (P)'s own runner on the device context, above the layouts
    "hemlp.gpu.runner": ("hemlp.fhe", "hemlp.he", "hemlp.pcmm", "hemlp.bootstrap", "hemlp.gpu", "hemlp.layouts",
                         "hemlp.runtime"),
    "hemlp.compiler": ("hemlp.fhe", "hemlp.he", "hemlp.planner", "hemlp.compiler"),
    # executes plans (their bootstrap steps included: hemlp.bootstrap is a building block below it); no layout logic
    "hemlp.runtime": ("hemlp.fhe", "hemlp.he", "hemlp.pcmm", "hemlp.bootstrap", "hemlp.planner", "hemlp.compiler",
                      "hemlp.runtime"),
    # resumable batch jobs take a compiled-model directory (hemlp.load): the one runtime module above the model
    "hemlp.runtime.jobs": ("hemlp", "hemlp.fhe", "hemlp.pcmm", "hemlp.runtime"),
    # serving a compiled-model directory over HTTP (hemlp.load, the artefacts, the Ray session)
    "hemlp.serving": ("hemlp", "hemlp.fhe", "hemlp.runtime", "hemlp.serving"),
}
#: the only packages that may import the applications and the comparison baselines
APPS = ("hemlp.apps", "hemlp.bench")
BASELINE_USERS = APPS + ("hemlp.baselines",)


def _foundation(scans) -> set[str]:
    """The leaf utilities every layer may use: top-level modules (hemlp/<name>.py) that import no hemlp module
    outside the foundation (hemlp.errors, hemlp.threads, ...), found as a fixed point."""
    top = {m for m in scans if m.count(".") == 1 and MODULES.get(m, Path()).name != "__init__.py"}
    found: set[str] = set()
    while True:
        more = {m for m in top - found if {t for t, _, _ in scans[m].edges} <= found}
        if not more:
            return found
        found |= more


def _modules() -> dict[str, Path]:
    mods = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


MODULES = _modules()


def _is_clean(mod: str) -> bool:
    return any(mod == c or mod.startswith(c + ".") for c in CLEAN if c != "hemlp") or mod == "hemlp"


def _resolve(mod: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    base = pkg[: len(pkg) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


class _Imports(ast.NodeVisitor):
    """Edges (target module, function-level?) and the names bound to hemlp / foreign modules."""

    def __init__(self, mod: str, path: Path):
        self.mod, self.path, self.depth = mod, path, 0
        self.edges: list[tuple[str, bool, int]] = []
        self.private: list[str] = []
        self.module_names: set[str] = set()     # local names bound to hemlp modules
        self.foreign_names: set[str] = set()    # local names bound to non-hemlp modules or their members

    def _function(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _edge(self, target: str, line: int):
        if target in ALLOWED_PRIVATE_MODULES:
            return
        if target in MODULES and target != self.mod:
            self.edges.append((target, self.depth > 0, line))

    def visit_Import(self, node):
        for a in node.names:
            if a.name.split(".")[0] != "hemlp":
                self.foreign_names.add((a.asname or a.name).split(".")[0])
                continue
            if any(p.startswith("_") and not p.startswith("__") for p in a.name.split(".")) \
                    and a.name not in ALLOWED_PRIVATE_MODULES:
                self.private.append(f"{self.path.name}:{node.lineno} import {a.name}")
            self._edge(a.name, node.lineno)
            if a.asname:
                self.module_names.add(a.asname)

    def visit_ImportFrom(self, node):
        src = _resolve(self.mod, self.path, node)
        if src.split(".")[0] != "hemlp":
            self.foreign_names.update(a.asname or a.name for a in node.names)
            return
        for a in node.names:
            full = f"{src}.{a.name}"
            if full in MODULES or full in ALLOWED_PRIVATE_MODULES:
                self._edge(full, node.lineno)
                self.module_names.add(a.asname or a.name)
            else:
                self._edge(src, node.lineno)
            if a.name.startswith("_") and not a.name.startswith("__") and full not in ALLOWED_PRIVATE_MODULES:
                self.private.append(f"{self.path.name}:{node.lineno} from {src} import {a.name}")


def _own_names(tree: ast.AST) -> set[str]:
    """Every name this module defines: functions, classes, assigned attributes and names, __slots__ entries."""
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            names.add(n.attr)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, ast.arg):
            names.add(n.arg)
        elif isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in n.targets):
            names.update(c.value for c in ast.walk(n.value) if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return names


def _scan(mod: str, path: Path):
    tree = ast.parse(path.read_text(), str(path))
    v = _Imports(mod, path)
    v.visit(tree)
    own = _own_names(tree)
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")):
            continue
        recv = n.value
        if isinstance(recv, ast.Name) and recv.id in ("self", "cls"):
            continue
        if isinstance(recv, ast.Name) and recv.id in v.module_names:
            v.private.append(f"{path.name}:{n.lineno} {recv.id}.{n.attr}")    # a private name of a hemlp module
        elif isinstance(recv, ast.Name) and recv.id in v.foreign_names:
            continue                                                         # sys._getframe & co: not ours
        elif n.attr not in own:
            v.private.append(f"{path.name}:{n.lineno} .{n.attr}")             # another module's private attribute
    return v


SCANS = {m: _scan(m, p) for m, p in MODULES.items()}


def _cycles(with_function_level: bool, select=lambda m: True) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), in the graph of the selected modules."""
    graph = {m: sorted({t for t, fn, _ in s.edges if (with_function_level or not fn) and select(t)})
             for m, s in SCANS.items() if select(m)}
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in graph:
        if m not in index:
            visit(m)
    return out


def _private_uses(select) -> dict[str, list[str]]:
    return {m: s.private for m, s in SCANS.items() if s.private and select(m)}


def test_the_scanner_sees_the_package():
    """The checks below are only as good as the graph: it must hold the modules and their known edges."""
    assert {"hemlp.model", "hemlp.layouts.packed", "hemlp.runtime.local", "hemlp.fhe.context",
            "hemlp.pcmm.matrix"} <= set(MODULES)
    assert ("hemlp.layouts.base", False) in {(t, fn) for t, fn, _ in SCANS["hemlp.layouts.packed"].edges}
    assert ("hemlp.model", True) in {(t, fn) for t, fn, _ in SCANS["hemlp"].edges}   # compile() loads it lazily


def test_the_checks_catch_what_they_forbid(tmp_path):
    """A cycle hidden in a function and a private import are found (the checks can fail)."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from hemlp.layouts import base\nfrom hemlp.fhe import _atomic_write\nx = obj._secret\n")
    v = _scan("hemlp.layouts.a", a)
    assert any("_atomic_write" in p for p in v.private) and any("._secret" in p for p in v.private)
    b.write_text("def f():\n    from hemlp.model import compile\n")
    assert ("hemlp.model", True, 2) in _scan("hemlp.layouts.b", b).edges


def _under(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def _layer_violations(scans) -> list[str]:
    out, foundation = [], _foundation(SCANS)
    for mod, scan in scans.items():
        keys = [k for k in LAYERS if _under(mod, k)]
        if not keys:
            continue
        allowed = LAYERS[max(keys, key=len)]
        for target, _, line in scan.edges:
            if target not in foundation and not any(target == a if a == "hemlp" else _under(target, a)
                                                    for a in allowed):
                out.append(f"{mod}:{line} imports {target}")
    return sorted(out)


def _upward_violations(scans) -> list[str]:
    out = []
    for mod, scan in scans.items():
        for target, _, line in scan.edges:
            if any(_under(target, a) for a in APPS) and not any(_under(mod, a) for a in APPS):
                out.append(f"{mod}:{line} imports the application {target}")
            if _under(target, "hemlp.baselines") and not any(_under(mod, a) for a in BASELINE_USERS):
                out.append(f"{mod}:{line} imports the comparison baseline {target}")
    return sorted(out)


def test_the_layer_rule_catches_an_upward_import(tmp_path):
    """The layer checks can fail: the scheme importing a building block, a building block importing bootstrapping
    or a layout, and library code importing the applications or a baseline are all reported."""
    cases = {"hemlp.fhe.x": "from hemlp.he import lintrans\n",
             "hemlp.he.x": "def f():\n    from hemlp.bootstrap import params\nfrom hemlp.layouts import base\n",
             "hemlp.layouts.x": "from hemlp.apps import cli\nfrom hemlp.baselines import jkls\n"}
    scans = {}
    for mod, src in cases.items():
        f = tmp_path / (mod.replace(".", "_") + ".py")
        f.write_text(src)
        scans[mod] = _scan(mod, f)
    assert _layer_violations(scans) == ["hemlp.fhe.x:1 imports hemlp.he.lintrans",
                                        "hemlp.he.x:2 imports hemlp.bootstrap.params",
                                        "hemlp.he.x:3 imports hemlp.layouts.base"]
    assert _upward_violations(scans) == ["hemlp.layouts.x:1 imports the application hemlp.apps.cli",
                                         "hemlp.layouts.x:2 imports the comparison baseline hemlp.baselines.jkls"]


def test_the_foundation_is_the_leaf_utilities():
    found = _foundation(SCANS)
    assert {"hemlp.errors", "hemlp.threads"} <= found
    assert not found & {"hemlp.model", "hemlp.pcmm", "hemlp"}


def test_every_layer_imports_only_the_layers_below_it():
    """fhe imports no building block; he no bootstrapping, layout, model or runtime; and so on up (LAYERS)."""
    assert {"hemlp.fhe.context", "hemlp.pcmm.dispatch", "hemlp.he.lintrans", "hemlp.he.ccmm.rectangular",
            "hemlp.bootstrap.bootstrapper", "hemlp.apps.cli", "hemlp.apps.bench.core"} <= set(MODULES)
    assert _layer_violations(SCANS) == []


def test_nothing_in_the_library_imports_apps_or_baselines():
    assert _upward_violations(SCANS) == []


def test_no_import_cycle_among_module_level_imports():
    assert _cycles(with_function_level=False) == []


def test_no_import_cycle_among_redesigned_modules():
    """Counting function-level imports: no cycle among the redesigned modules."""
    assert _cycles(with_function_level=True, select=_is_clean) == []


def test_no_private_name_across_modules_in_redesigned_modules():
    assert _private_uses(_is_clean) == {}


def test_no_import_cycle_at_all():
    """Counting function-level imports, across the whole package."""
    assert _cycles(with_function_level=True) == []


def test_no_private_name_across_modules_anywhere():
    assert _private_uses(lambda m: True) == {}
