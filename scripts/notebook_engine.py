"""Run the notebook's engine cells (every code cell not tagged `demo`) and return their namespace.

Tests, benchmarks and the picture script use this, so there is exactly one copy of the model
code: the notebook's.

    from notebook_engine import load_engine
    qwen = load_engine("models/tiny", dtype="float32")
    qwen["generate"]([[1, 2, 3]], 8)
"""

import json
import os
import types
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parent.parent / "qwen3_from_scratch.ipynb"


def engine_cells(notebook=NOTEBOOK, include_demo=False, tags=(), before=None):
    """The source of each code cell to run, in order: the engine (cells not tagged `demo`), plus
    demo cells carrying one of `tags` (e.g. "plots", "mistakes"), or every cell with include_demo.
    before: a heading ("# Part 5"): only the cells above the markdown cell that starts with it."""
    cells = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    if before is not None:
        cells = cells[:next(i for i, c in enumerate(cells)
                            if c["cell_type"] == "markdown" and "".join(c["source"]).startswith(before))]
    chosen = []
    for c in cells:
        cell_tags = c.get("metadata", {}).get("tags", [])
        if c["cell_type"] == "code" and (include_demo or "demo" not in cell_tags or set(tags) & set(cell_tags)):
            chosen.append("".join(c["source"]))
    return chosen


def load_engine(model_dir, device="cpu", dtype="float32", include_demo=False, tags=(), before=None,
                notebook=NOTEBOOK, **env):
    """Execute the engine cells of `notebook` (those above the heading `before`, if given) with QWEN3_MODEL_DIR /
    QWEN3_DEVICE / QWEN3_DTYPE set; return the namespace as a dict-like module (engine["forward"], engine.forward)."""
    settings = {"QWEN3_DEVICE": device, "QWEN3_DTYPE": dtype, **env}
    if model_dir is not None:  # None: the notebook's default, models/$QWEN3_MODEL
        settings["QWEN3_MODEL_DIR"] = str(model_dir)
    saved = {k: os.environ.get(k) for k in [*settings, "QWEN3_MODEL_DIR"]}
    if model_dir is None:
        os.environ.pop("QWEN3_MODEL_DIR", None)
    os.environ.update({k: str(v) for k, v in settings.items()})
    module = types.ModuleType("qwen3_notebook")
    try:
        for source in engine_cells(notebook, include_demo=include_demo, tags=tags, before=before):
            exec(compile(source, str(notebook), "exec"), module.__dict__)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Engine(module)


class Engine:
    """The notebook's namespace; items and attributes both work."""

    def __init__(self, module):
        self.__dict__["_module"] = module

    def __getitem__(self, name):
        return getattr(self._module, name)

    def __getattr__(self, name):
        return getattr(self._module, name)

    def __setitem__(self, name, value):
        setattr(self._module, name, value)

    __setattr__ = __setitem__

    def __contains__(self, name):
        return hasattr(self._module, name)
