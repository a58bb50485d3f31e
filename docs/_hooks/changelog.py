"""mkdocs hook: the site's changelog page is the repository's CHANGELOG.md (one source)."""

from pathlib import Path

from mkdocs.structure.files import File

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"


def on_files(files, config):
    files.append(File.generated(config, "changelog.md", abs_src_path=str(CHANGELOG)))
    return files
