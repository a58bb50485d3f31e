"""griffe extension for the API pages: the docstrings' Sphinx roles (``:func:`x```) as inline code."""

import re

import griffe

_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc|const):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(r"`\1`", obj.docstring.value)
