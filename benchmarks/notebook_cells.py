"""Run the whole notebook top to bottom in a real kernel, as a reader would, and record each code cell: its
seconds, its error (if any: later cells still run), and how many graphs torch.compile made while it ran.

    QWEN3_DEVICE=cuda QWEN3_MODEL_DIR=models/tiny python3 benchmarks/notebook_cells.py OUT_DIR

Writes OUT_DIR/notebook_cells.json (rewritten after every cell: a kill keeps what ran) and the executed notebook
OUT_DIR/notebook_run.ipynb. Exit status 0 when no cell raised. benchmarks/device_check.sh runs it on the GPU.
"""

import json
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
# graphs torch.compile made so far; it imports nothing (torch is imported, and its settings read, by the notebook)
PROBE = ("import sys as __s; __d = __s.modules.get('torch._dynamo.utils'); "
         "print('__graphs__', __d.counters['stats']['unique_graphs'] if __d else 0)")


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/notebook_cells")
    out.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(ROOT / "qwen3_from_scratch.ipynb", as_version=4)
    client = NotebookClient(nb, timeout=-1, kernel_name="python3", allow_errors=True, resources={
        "metadata": {"path": str(ROOT)}})
    rows, graphs = [], 0
    cells, probe = list(nb.cells), nbformat.v4.new_code_cell(PROBE)
    nb.cells.append(probe)  # run after each cell, at the end of the list (nbclient writes outputs by index)
    with client.setup_kernel():
        for index, cell in enumerate(cells):
            if cell.cell_type != "code":
                continue
            t0 = time.perf_counter()
            client.execute_cell(cell, index)
            seconds = time.perf_counter() - t0
            error = next((f"{o.ename}: {o.evalue}"[:300] for o in cell.outputs if o.output_type == "error"), None)
            client.execute_cell(probe, len(nb.cells) - 1)
            said = "".join(o.get("text", "") for o in probe.outputs)
            now = int(said.split()[1]) if "__graphs__" in said else graphs
            rows.append({"cell": index, "id": cell.get("id"), "tags": cell.metadata.get("tags", []),
                         "seconds": round(seconds, 2), "error": error,
                         "graphs_compiled": now - graphs})
            graphs = now
            (out / "notebook_cells.json").write_text(json.dumps(rows, indent=1) + "\n")
            print(f"cell {index:3d} {cell.get('id')}: {seconds:6.1f} s"
                  + (f", {rows[-1]['graphs_compiled']} graphs compiled" if rows[-1]["graphs_compiled"] else "")
                  + (f", ERROR {error}" if error else ""), flush=True)
    nb.cells.pop()
    nbformat.write(nb, out / "notebook_run.ipynb")
    errors = [r for r in rows if r["error"]]
    print(f"notebook: {len(rows)} code cells, {sum(r['seconds'] for r in rows):.0f} s, {len(errors)} errors, "
          f"{sum(r['graphs_compiled'] for r in rows)} graphs compiled", flush=True)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
