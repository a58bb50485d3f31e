"""Synthesis forms: one immutable pytree class per way of computing the line model.

* :class:`DenseForm` (``"dense"``): the exact cube of shifted local profiles;
* :class:`FoldedForm` (``"folded"``): the dense model as photosphere plus spot differences,
  float32 or float64 (what solvers iterate on);
* :class:`BlockedForm` (``"blocked"``): the folded model as epoch blocks (batches of maps);
* :class:`BinnedForm` (``"binned"``): memory-light synthesis through a velocity histogram.

All follow the protocol of :class:`~dopplermap.forms.base.Form`; the rest of the package
never asks which form it holds. :data:`FORMS` maps the user's ``method`` option (resolved by
:func:`dopplermap.plan.synthesis_method`) to the class :func:`dopplermap.precompute` builds.
"""

from .base import Form, Setup, eval_profile, is_mu_dependent
from .binned import BinnedForm, MuBasis, choose_bin_width
from .blocked import DEFAULT_BLOCKS, BlockedForm, blocked_nbytes, phase_order
from .dense import DenseForm, block_dense, dense_numerator, fold_dense
from .folded import FoldedForm

__all__ = ["Form", "Setup", "DenseForm", "FoldedForm", "BlockedForm", "BinnedForm", "FORMS", "MuBasis",
           "choose_bin_width", "eval_profile", "is_mu_dependent", "fold_dense", "block_dense", "dense_numerator",
           "blocked_nbytes", "phase_order", "DEFAULT_BLOCKS"]

FORMS = {"dense": DenseForm, "binned": BinnedForm}
"""The forms :func:`dopplermap.precompute` builds, by the name of its ``method`` option
(:data:`dopplermap.choices.FORMS`)."""
