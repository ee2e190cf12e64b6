"""The runtime's import structure, read from the source (AST; nothing is imported): no import cycle among the
modules of hemlp/runtime/, and in the Ray runtime, the batch jobs and the artefacts no private name of another
module and no function-level import of a hemlp module (a function-level import is how a cycle hides)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "hemlp" / "runtime"

#: the modules these rules hold for without exception (the other runtime modules belong to the layouts)
STRICT = sorted((RUNTIME / "ray").glob("*.py")) + [RUNTIME / n for n in ("jobs.py", "artifacts.py")]

#: function-level imports of hemlp modules that remain, each with its reason (none)
KNOWN_FUNCTION_IMPORTS: set = set()
#: private attributes still read, each with its reason (none: the fault injection lives in tests/runtime/faults.py)
KNOWN_PRIVATE: set = set()
#: hemlp._core is the native extension (pybind11), a module, not a private name of one
NATIVE = "_core"
#: optional third-party packages, imported where they are used so that hemlp imports without them
OPTIONAL = {"ray", "grpc", "tqdm"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(RUNTIME.rglob("*.py"))}


def imported_modules(node) -> list:
    """The modules an import statement loads (`from pkg import sub` loads pkg.sub when that is a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:  # relative imports are not used in hemlp; resolve none
        raise AssertionError(f"relative import at line {node.lineno}")
    out = [node.module]
    out += [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES]
    return out


def function_imports(tree):
    """(function name, import node) for every import inside a function or method."""
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    yield fn.name, node


def test_runtime_modules_have_no_import_cycle():
    graph = {}
    for name, path in MODULES.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for mod in imported_modules(node):
                    # a module's own packages run before it: that is not an edge of a cycle
                    if mod in MODULES and mod != name and not name.startswith(mod + "."):
                        deps.add(mod)
        graph[name] = deps
    assert "hemlp.runtime.ray.program" in graph and "hemlp.runtime.jobs" in graph

    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("path", STRICT, ids=lambda p: str(p.relative_to(RUNTIME)))
def test_no_private_names_across_modules(path):
    tree = ast.parse(path.read_text())
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            bad += [f"line {node.lineno}: from {node.module} import {a.name}" for a in node.names
                    if a.name.startswith("_") and a.name != NATIVE]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")) and (
                    path.name, f"{ast.unparse(owner)}.{node.attr}") not in KNOWN_PRIVATE:
                bad.append(f"line {node.lineno}: .{node.attr} on {ast.unparse(owner)}")
    assert not bad, f"{path.name} reaches into other modules' private names: {bad}"


@pytest.mark.parametrize("path", STRICT, ids=lambda p: str(p.relative_to(RUNTIME)))
def test_no_function_level_imports_of_hemlp(path):
    bad = []
    for fn, node in function_imports(ast.parse(path.read_text())):
        for mod in imported_modules(node):
            top = mod.split(".")[0]
            if top in OPTIONAL or (path.name, fn, mod) in KNOWN_FUNCTION_IMPORTS:
                continue
            bad.append(f"{fn}() line {node.lineno}: {mod}")
    assert not bad, f"{path.name}: function-level imports (import at module level; a cycle must be broken): {bad}"


def test_the_checks_see_what_they_check(tmp_path):
    """The rules above catch what they forbid (so their passing means something)."""
    src = ("from hemlp.fhe import _atomic_write\n"
           "def f(ctx):\n    from hemlp.pcmm import CtMatrix\n    return ctx._e\n")
    tree = ast.parse(src)
    assert [(fn, imported_modules(n)) for fn, n in function_imports(tree)] == [("f", ["hemlp.pcmm"])]
    f = tmp_path / "bad.py"
    f.write_text(src)
    with pytest.raises(AssertionError, match=r"_atomic_write.*\._e on ctx"):
        test_no_private_names_across_modules(f)
    with pytest.raises(AssertionError, match="hemlp.pcmm"):
        test_no_function_level_imports_of_hemlp(f)
