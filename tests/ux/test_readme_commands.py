"""#19 done-when: the README's shell commands, run as printed, in fresh virtual environments (slow: installs the
project and its extras from a clean copy of the checkout and builds the C++ core twice; `make test-readme`).

Every ```bash block of README.md is taken apart into its commands (comment lines dropped) and each command runs
literally, in order, with `bash -e -c`, and must exit 0:

* the block at the top (`make demo`, `make test`) in a clean copy of the repository (the tracked and untracked,
  not ignored, files: what a clone holds), as a new user on a Debian machine runs it: the Makefile makes its own
  ``.venv`` there. `make test` is the one command left to CI: .ci/run runs exactly `make test` on a clean clone of
  every submission (running the suite inside its own slow test would double the longest CI step);
* the "Command line" block in an empty temporary directory, in a second fresh venv where
  ``pip install '<clean copy>[ml]'`` installed hemlp as the README's text says (a regular install, not
  editable; pip's download cache is shared with the user's, the project is built from source); then the files
  the block names exist: the exported model and digits, both artefacts, the keys, the ciphertexts, the result,
  the batch job's output and the benchmark's JSON.

The commands run as they are printed; only the environment is the test's: PATH starts with the venv's bin
(as after `source venv/bin/activate`) and PYTHONPATH / VIRTUAL_ENV of the calling process are removed.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

#: commands of the README's blocks that this test does not run, and who runs them instead
RUN_ELSEWHERE = {"make test": ".ci/run runs exactly `make test` on a clean clone of every submission"}


def bash_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(heading, commands) of every ```bash block, in order: a command is a line that is not empty and not only a
    comment (a trailing comment stays: bash ignores it)."""
    out = []
    for m in re.finditer(r"```bash\n(.*?)```", text, re.S):
        heading = (re.findall(r"^#+ (.*)$", text[: m.start()], re.M) or ["(top)"])[-1]
        cmds = [ln.strip() for ln in m.group(1).splitlines() if ln.strip() and not ln.strip().startswith("#")]
        out.append((heading, cmds))
    return out


def command_of(line: str) -> str:
    """The command without its trailing comment (for RUN_ELSEWHERE)."""
    return line.split(" #", 1)[0].strip()


def clean_copy(dst: Path) -> Path:
    """The checkout's files as a clone would hold them: tracked plus untracked-but-not-ignored files (no build
    products, no .venv); a copy without the ignored files when this is not a git checkout (an sdist)."""
    try:
        ls = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(REPO, dst, ignore=shutil.ignore_patterns(".venv", "build", "*.so", "__pycache__", "*.egg-info"))
        return dst
    for rel in filter(None, ls):
        src, to = REPO / rel, dst / rel
        if not (src.is_symlink() or src.is_file()):   # a listed file deleted in the work tree is not copied
            continue
        to.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():                    # hemlp/models -> ../models: links stay links
            os.symlink(os.readlink(src), to)
        else:
            shutil.copy2(src, to)
    return dst


def user_env(venv_bin: Path | None = None) -> dict:
    """This process's environment as a user's shell: no PYTHONPATH / VIRTUAL_ENV / make variables, no venv's bin
    on PATH (the test's own venv would shadow python3), the fresh venv's bin first when given (an activated
    venv)."""
    # make's variables: under `make test-readme VENV=...` an inner `make demo` would inherit the caller's VENV
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_CURRENT_TEST", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES",
            "VENV", "PYTHON_BOOT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    here = Path(sys.prefix) / "bin"
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p) != here]
    env["PATH"] = os.pathsep.join(([str(venv_bin)] if venv_bin else []) + path)
    if shutil.which("ccache"):   # as `make build` does; the same sources in another directory still hit the cache
        env.update(CC="ccache gcc", CXX="ccache g++", CCACHE_NOHASHDIR="1")
    env["HEMLP_QUIET"] = "1"                    # no progress bars in the captured output
    return env


def run_line(line: str, cwd: Path, env: dict, log: list, timeout: float = 3600) -> subprocess.CompletedProcess:
    t0 = time.perf_counter()
    p = subprocess.run(["bash", "-e", "-c", line], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    log.append((line, round(time.perf_counter() - t0, 1)))
    assert p.returncode == 0, f"`{line}` (in {cwd}) exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def test_bash_blocks_are_found_and_parsed():
    """The README has the two blocks this test runs, and every command of the CLI block is a hemlp command."""
    blocks = bash_blocks(README.read_text())
    assert len(blocks) == 2, [h for h, _ in blocks]
    (top, make_cmds), (cli_heading, cli) = blocks
    assert [command_of(c) for c in make_cmds] == ["make demo", "make test"]
    assert cli_heading == "Command line" and all(c.startswith("hemlp ") for c in cli)
    # the block makes the files its later commands read: the model, calibration and input come first
    assert cli[0].startswith("hemlp demo") and "--export ." in cli[0]
    assert bash_blocks("# A\n```bash\nls  # x\n   # only a comment\n\necho 1\n```\n") == [("A", ["ls  # x", "echo 1"])]


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_readme_commands_run_as_printed_in_fresh_venvs(tmp_path):
    blocks = bash_blocks(README.read_text())
    (_, make_cmds), (_, cli) = blocks
    src = clean_copy(tmp_path / "hemlp")
    log: list = []
    t_start = time.perf_counter()
    try:
        # 1. the top block, in the clean copy (the Makefile installs its .venv and builds)
        for line in make_cmds:
            if command_of(line) in RUN_ELSEWHERE:
                log.append((line, RUN_ELSEWHERE[command_of(line)]))
                continue
            p = run_line(line, src, user_env(), log)
        assert "accuracy on" in p.stdout                               # `make demo`: the model demo's summary
        assert (src / ".venv" / "bin" / "hemlp").is_file()             # ... run from the venv the Makefile made
        shutil.rmtree(src / ".venv")            # 7 GB: the CLI block gets its own venv below

        # 2. the "Command line" block in an empty directory, hemlp installed with the ml extra into a new venv
        venv, work = tmp_path / "venv", tmp_path / "work"
        work.mkdir()
        base = getattr(sys, "_base_executable", sys.executable)
        run_line(f"{base} -m venv {venv}", tmp_path, user_env(), log)
        env = user_env(venv / "bin")
        run_line("python -m pip install -q --upgrade pip", work, env, log)
        run_line(f"python -m pip install -q '{src}[ml]'", work, env, log)
        p = run_line("python -c 'import hemlp, hemlp._core; print(hemlp.__file__)'", work, env, log)
        assert str(venv) in p.stdout                                   # the installed package, not a checkout
        for line in cli:
            run_line(line, work, env, log)

        # the files the block names
        for f in ("model.onnx", "calib.npy", "x.npy", "keys/secret.key", "keys/eval.keys", "cts/x.ct", "y.ct",
                  "y.npy", "core.json"):
            assert (work / f).is_file() and (work / f).stat().st_size > 0, f
        for d in ("m.hemlp", "c.hemlp"):
            assert (work / d).is_dir(), d
        assert (work / "out" / "x.ct").is_file()                       # the batch job's result for cts/x.ct
        import numpy as np

        y, x = np.load(work / "y.npy"), np.load(work / "x.npy")
        assert y.shape == (len(x), 10)
        assert json.loads((work / "core.json").read_text())["results"]
    finally:
        total = time.perf_counter() - t_start
        print("\n".join(f"{t:8.1f} s  {line}" if isinstance(t, float) else f"  (not run: {t})  {line}"
                        for line, t in log) + f"\n{total:.0f} s in all")
        shutil.rmtree(tmp_path, ignore_errors=True)   # two venvs with torch: pytest keeps its last tmp dirs
