"""The docs quote their sources: docs/benchmarks.md is the rendering of bench/*.json (scripts/bench_tables.py),
the preset table of docs/security.md is hemlp.fhe.Params.presets(), the README stays a short front page, and the
worked examples of docs/extending.md apply to the tree and pass their tests."""
import importlib.util
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench_tables():
    spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "scripts" / "bench_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmarks_doc_is_rendered_from_the_json_files():
    bt = _bench_tables()
    assert (ROOT / "docs" / "benchmarks.md").read_text() == bt.render(), \
        "docs/benchmarks.md is stale: run python scripts/bench_tables.py"


def test_readme_bootstrapping_figures_are_rendered_from_the_json_files():
    bt = _bench_tables()
    text = (ROOT / "README.md").read_text()
    assert bt.README_BOOT in text.splitlines()
    assert text == bt.render_readme(text), "the README's bootstrapping line is stale: run python scripts/bench_tables.py"


def test_every_benchmark_section_names_an_existing_json_file():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    sections = text.split("\n## ")[1:]
    assert len(sections) >= 10
    for s in sections:
        names = re.findall(r"`(?:bench/)?([\w.]+\.json)`", s)
        assert names, f"section {s.splitlines()[0]!r} names no JSON file"
        assert all((ROOT / "bench" / n).is_file() for n in names), names


def test_security_doc_preset_table_is_the_code():
    from hemlp.fhe import Params

    text = (ROOT / "docs" / "security.md").read_text()
    rows = re.findall(r"^\| `([\w-]+)` \| 2\^(\d+) \| (\d+) \| ([\d.]+) \| (\d+) \| ([\w-]+) \|$", text, re.M)
    want = [(p["name"], str(p["N"].bit_length() - 1), str(p["depth"]), f"{p['log_qp']:g}", str(p["max_log_qp_128"]),
             p["security"]) for p in Params.presets()]
    assert rows == want


def test_readme_is_a_short_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 170
    code = [ln for ln in lines if ln.startswith("make ")]
    assert code[:2] and code[0].startswith("make demo") and code[1].startswith("make test")
    for link in re.findall(r"\]\((docs/[\w.]+)\)", "\n".join(lines)):
        assert (ROOT / link).is_file() or link == "docs/ray.md", link   # docs/ray.md: written with the Ray runtime


# ---- docs/extending.md: its worked examples are applied to a scratch copy of the tree and their tests run there

#: a block of the page: <!-- extend: PATH after|before: `LINE` --> or <!-- extend: PATH new -->, then a python block
_EXTEND = re.compile(r"<!-- extend: (?P<path>\S+) (?P<where>after|before|new)(?:: `(?P<anchor>.*?)`)? -->\n"
                     r"```python\n(?P<code>.*?)```\n", re.S)


def _extending_sections() -> dict:
    """Section title -> (the files its table names, its blocks)."""
    text = (ROOT / "docs" / "extending.md").read_text()
    out = {}
    for sec in text.split("\n## ")[1:]:
        title = sec.splitlines()[0]
        named = re.findall(r"^\| `([\w/.]+)` \|", sec, re.M)
        out[title] = (named, [m.groupdict() for m in _EXTEND.finditer(sec)])
    return out


def _apply(root: Path, block: dict) -> None:
    f = root / block["path"]
    if block["where"] == "new":
        assert not f.exists(), f"{block['path']} exists already"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(block["code"])
        return
    lines = f.read_text().splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == block["anchor"].strip()]
    assert len(hits) == 1, (f"docs/extending.md: the line {block['anchor']!r} occurs {len(hits)} times in "
                            f"{block['path']}: update the page's marker")
    at = hits[0] + (1 if block["where"] == "after" else 0)
    lines[at:at] = [block["code"]]
    f.write_text("".join(lines))


def test_extending_examples_touch_exactly_the_files_the_page_names():
    sections = _extending_sections()
    assert set(sections) == {"Adding an op", "Adding a layout"}
    for title, (named, blocks) in sections.items():
        assert blocks, title
        assert sorted(set(named)) == sorted(named), f"{title}: a file is named twice"
        assert {b["path"] for b in blocks} == set(named), title


def test_extending_examples_apply_to_the_tree_and_their_tests_pass(tmp_path):
    """The toy op (torch.negative as a free negate step) and the toy layout (G), applied to a copy of the package
    and the tests they need; then the examples' tests and the op coverage test run there (the new op in every table
    of every layout, the new layout running or refusing every step op)."""
    import shutil
    import subprocess
    import sys

    shutil.copytree(ROOT / "hemlp", tmp_path / "hemlp", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in ("pyproject.toml", "tests/__init__.py", "tests/conftest.py", "tests/compiler/__init__.py",
              "tests/compiler/conftest.py", "tests/compiler/test_op_coverage.py", "tests/layouts/__init__.py",
              "tests/layouts/conftest.py"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, tmp_path / f)
    for _, blocks in _extending_sections().values():
        for b in blocks:
            _apply(tmp_path, b)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    tests = ["tests/compiler/test_negate.py", "tests/layouts/test_grouped.py", "tests/compiler/test_op_coverage.py"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests,
                          "-k", "not runs_or_refuses or grouped"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "negate" in (tmp_path / "hemlp" / "step_ops.py").read_text()
