"""mkdocs hook: the quick-start notebook (docs/quickstart.ipynb) as a page of the site.

Markdown cells are copied, code cells become Python blocks and the outputs stored in the
notebook (text, PNG figures) follow their cell. With ``DOPPLERMAP_DOCS_EXECUTE=1`` (and
nbclient installed, as with ``pip install -e ".[test]"``) the notebook is executed in a
fresh kernel first, so the page shows its figures; the file in the repository is left as it is.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from mkdocs.structure.files import File

NOTEBOOK = Path(__file__).resolve().parents[1] / "quickstart.ipynb"
PAGE = "quickstart.md"


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _executed(nb: dict) -> dict:
    if os.environ.get("DOPPLERMAP_DOCS_EXECUTE") != "1":
        return nb
    import nbformat
    from nbclient import NotebookClient

    node = nbformat.reads(json.dumps(nb), as_version=4)
    with tempfile.TemporaryDirectory() as tmp:  # what the notebook writes stays out of docs/
        NotebookClient(node, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp}}).execute()
    return json.loads(nbformat.writes(node))


def render(nb: dict) -> str:
    """The notebook as Markdown: its cells in order, each code cell's stored outputs after it."""
    out = [f"<!-- rendered from docs/{NOTEBOOK.name} by docs/_hooks/notebook.py -->\n"]
    for cell in nb.get("cells", []):
        source = _text(cell.get("source", ""))
        if cell.get("cell_type") == "markdown":
            out.append(source.strip() + "\n")
            continue
        if cell.get("cell_type") != "code" or not source.strip():
            continue
        out.append("```python\n" + source.rstrip() + "\n```\n")
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if "image/png" in data:
                out.append(f"![figure](data:image/png;base64,{_text(data['image/png']).strip()})\n")
            elif o.get("output_type") == "stream" or "text/plain" in data:
                text = _text(o.get("text", data.get("text/plain", ""))).rstrip()
                if text:
                    out.append("```text\n" + text + "\n```\n")
    out.append(f"[Download the notebook]({NOTEBOOK.name}) and run it with Jupyter.\n")
    return "\n".join(out)


def on_files(files, config):
    nb = json.loads(NOTEBOOK.read_text())
    files.append(File.generated(config, PAGE, content=render(_executed(nb))))
    return files
