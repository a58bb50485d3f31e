"""Defaults of the app's pipelines that the commands' ``--help`` shows; it imports nothing,
so that the CLI can read them at start-up."""

# solver tolerances of the searches on the demo star or an .npz problem (a target TOML
# brings its own [inversion] settings, whose tol lambda and grid tighten to these at most);
# tighter than a single inversion's so that chi2 is smooth across lambdas and grid points
LAMBDA_TOL, GRID_TOL = 1e-7, 1e-6

# how grid reads a point's chi2 (dopplermap.choices.GRID_READOUTS)
DEFAULT_READOUT = "regularised"
