"""The package version, in one place (pyproject.toml reads it through hatchling)."""

__version__ = "0.1.0"
