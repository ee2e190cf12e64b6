"""The docs quote their sources: docs/benchmarks.md is the rendering of bench/*.json (scripts/bench_tables.py),
the preset table of docs/security.md is hemlp.fhe.Params.presets(), and the README stays a short front page."""
import importlib.util
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
