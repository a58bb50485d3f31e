"""What several test modules share: small problems (:mod:`support.problems`) and reference
solvers, scenarios and file writers (:mod:`support.helpers`).

Importable as ``support`` because ``[tool.pytest.ini_options] pythonpath`` puts ``tests/``
(and ``benchmarks/``, whose scripts some tests check) on the path: no test inserts paths itself.
"""
