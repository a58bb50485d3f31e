"""``python -m dopplermap``: the command-line interface (the same as the ``dopplermap`` command)."""

from .cli import run

run()
