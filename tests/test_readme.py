"""README's commands work as written (issue 47): its marked code blocks are extracted and run in a fresh copy
of the repository, in a fresh virtual environment: the set-up, the run with no checkpoint and no hub (it must
stop within seconds, its last lines naming every route), and the random-checkpoint route end to end."""

import json
import os
import re
import shutil
import subprocess
import textwrap
import time

import pytest

from conftest import ROOT

README = (ROOT / "README.md").read_text()


def blocks():
    """{name: the bash block after `<!-- readme-test: name -->`}, as README shows it."""
    found = re.findall(r"<!-- readme-test: (\w+) -->\s*```bash\n(.*?)```", README, re.S)
    return {name: textwrap.dedent(code) for name, code in found}


def notebook_message():
    """The offline message's source, as the notebook's checkpoint cell writes it."""
    cells = json.loads((ROOT / "qwen3_from_scratch.ipynb").read_text())["cells"]
    return next("".join(c["source"]) for c in cells if "def ensure_checkpoint" in "".join(c["source"]))


def test_readme_is_short_and_its_commands_are_the_notebooks():
    assert len(README.splitlines()) <= 210 and len(README.split()) <= 2100, (len(README.splitlines()),  # 53: exercises
                                                                           len(README.split()))
    assert set(blocks()) == {"setup", "run", "random"}
    run = blocks()["run"].strip()
    message = notebook_message()
    assert run == "python3 -m jupyter nbconvert --to notebook --execute --output-dir runs qwen3_from_scratch.ipynb"
    assert run.replace(" qwen3_from_scratch.ipynb", "") in message and '"qwen3_from_scratch.ipynb"' in message
    for command in ("hf download {hub_id} {local}", "HF_ENDPOINT=https://hf-mirror.com hf download",
                    "modelscope download {hub_id} {local}", "QWEN3_MODEL_DIR=/path/to/checkpoint {run}",
                    "python3 scripts/convert_gguf.py models/SmolLM2-135M-Instruct",
                    "QWEN3_MODEL=SmolLM2-135M-Instruct {run}", "python3 scripts/make_checkpoint.py models/tiny",
                    "QWEN3_MODEL_DIR=models/tiny {run}"):
        assert command in message, command
    for command in ("hf download Qwen/Qwen3-0.6B --local-dir models/Qwen3-0.6B",
                    "modelscope download Qwen/Qwen3-0.6B --local-dir models/Qwen3-0.6B",
                    "python3 scripts/convert_gguf.py models/SmolLM2-135M-Instruct",
                    f"QWEN3_MODEL=SmolLM2-135M-Instruct {run}", f"QWEN3_MODEL_DIR=models/tiny {run}"):
        assert command in README, command
    test_command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"```bash\n{test_command}\n```" in README  # CI runs README's exact test command


def test_every_relative_link_names_a_file_that_exists():
    """README's, docs/'s and the notebook's links and pictures (what left README must be findable from it)."""
    cells = json.loads((ROOT / "qwen3_from_scratch.ipynb").read_text())["cells"]
    pages = {ROOT / "README.md": README, ROOT / "qwen3_from_scratch.ipynb": "\n".join(
        "".join(c["source"]) for c in cells if c["cell_type"] == "markdown")}
    pages |= {page: page.read_text() for page in (ROOT / "docs").glob("*.md")}
    broken = [(page.name, target) for page, text in pages.items()
              for target in re.findall(r"\]\(([^()#\s]+)(?:#[^()\s]*)?\)", text)
              if not target.startswith(("http://", "https://")) and not (page.parent / target).exists()]
    assert not broken, broken
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", README))
    assert {"reference.md", "gpu.md", "performance.md"} <= linked, linked


def tracked_copy(dest):
    """The repository as a fresh clone has it (tracked files, as they are in this working tree)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, files.stdout.split("\0")):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_readme_commands_as_written_in_a_fresh_clone_and_environment(tmp_path):
    clone = tmp_path / "clone"
    tracked_copy(clone)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("QWEN3_")}
    env |= {"HF_HUB_OFFLINE": "1", "PIP_RETRIES": "0", "PIP_TIMEOUT": "5"}  # no hub; an unreachable index fails fast

    def bash(script, **extra):
        t0 = time.perf_counter()
        done = subprocess.run(["bash", "-c", "set -e\nsource .venv/bin/activate 2>/dev/null || true\n" + script],
                              cwd=clone, env=env | extra, capture_output=True, text=True, timeout=900)
        return done, time.perf_counter() - t0

    setup, _ = bash(blocks()["setup"])
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-3000:]
    assert (clone / ".venv").is_dir()

    offline, seconds = bash(blocks()["run"])  # no models/Qwen3-0.6B and no hub
    last = "\n".join((offline.stdout + offline.stderr).strip().splitlines()[-16:])
    assert offline.returncode != 0 and seconds < 90, (offline.returncode, seconds, last)
    assert "No checkpoint in 'models/Qwen3-0.6B'" in last and "Any one of these" in last, last
    for route in ("hf download Qwen/Qwen3-0.6B --local-dir models/Qwen3-0.6B", "modelscope download",
                  "QWEN3_MODEL_DIR=/path/to/checkpoint", "scripts/convert_gguf.py", "scripts/make_checkpoint.py"):
        assert route in last, (route, last)

    random, _ = bash(blocks()["random"])
    assert random.returncode == 0, random.stdout[-2000:] + random.stderr[-3000:]
    ran = json.loads((clone / "runs" / "qwen3_from_scratch.ipynb").read_text())["cells"]
    errors = [o for c in ran for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors and any("prompt tokens" in "".join(o.get("text", "")) for c in ran
                              for o in c.get("outputs", [])), errors[:1]
