"""The uncertainty file of a result folder (``uncertainty_<method>.npz``): written and read back
here, NumPy only, so that figures and reports of a result read it without JAX."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..atomic import write_file
from ..choices import uncertainty_choice
from ..errors import DopplermapInputError
from ..result import Uncertainty

__all__ = ["save_uncertainty", "load_uncertainty"]


def save_uncertainty(unc: Uncertainty, folder) -> Path:
    """Write ``uncertainty_<method>.npz`` (sigma_fssc, sigma_fssh, never_visible, the full method
    name; for Laplace also lower_*, upper_* and at_bound_* per component) into ``folder``;
    ``<method>`` is the user's choice (``laplace``, ``sandwich``, ``bootstrap``,
    :func:`dopplermap.choices.uncertainty_choice`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    extra = {}
    if unc.lower is not None:
        for i, comp in enumerate(("fssc", "fssh")):
            extra.update({f"lower_{comp}": unc.lower[i], f"upper_{comp}": unc.upper[i],
                          f"at_bound_{comp}": unc.at_bound[i]})
    return write_file(folder / f"uncertainty_{uncertainty_choice(unc.method)}.npz",
                      lambda fh: np.savez(fh, sigma_fssc=unc.sigma_fssc, sigma_fssh=unc.sigma_fssh,
                                          never_visible=unc.never_visible, method=unc.method, **extra))


def load_uncertainty(path) -> Uncertainty:
    """Read back an ``uncertainty_<method>.npz`` of :func:`save_uncertainty` (a result folder's):
    the :class:`Uncertainty` with its sigmas, never-visible cells, method and (Laplace) bounded
    intervals; the bootstrap's samples and the timings are not in the file. A file that is not one
    is a :class:`~dopplermap.errors.DopplermapInputError` naming it and what is missing."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise DopplermapInputError(f"{path}: no such uncertainty file") from None
    except (OSError, ValueError) as exc:
        raise DopplermapInputError(f"{path}: not an uncertainty file of dopplermap ({exc})") from None
    keys = ("sigma_fssc", "sigma_fssh", "never_visible", "method")
    if any(k.startswith(("lower_", "upper_", "at_bound_")) for k in data):  # Laplace's intervals: all six
        keys += tuple(f"{b}_{c}" for b in ("lower", "upper", "at_bound") for c in ("fssc", "fssh"))
    missing = [k for k in keys if k not in data]
    if missing:
        raise DopplermapInputError(f"{path}: not an uncertainty file of dopplermap (no {', '.join(missing)})")
    n = np.shape(data["sigma_fssc"])
    if np.ndim(data["sigma_fssc"]) != 1 or np.shape(data["sigma_fssh"]) != n or np.shape(data["never_visible"]) != n:
        raise DopplermapInputError(f"{path}: sigma_fssc, sigma_fssh and never_visible must be (n_cell,) arrays of one "
                                   f"length, got {n}, {np.shape(data['sigma_fssh'])}, {np.shape(data['never_visible'])}")
    bounds = {}
    if "lower_fssc" in data:
        bounds = {k: np.stack([data[f"{k}_fssc"], data[f"{k}_fssh"]]) for k in ("lower", "upper", "at_bound")}
        if any(b.shape != (2, *n) for b in bounds.values()):
            raise DopplermapInputError(f"{path}: lower_*, upper_* and at_bound_* must be (n_cell,) arrays like the "
                                       f"sigmas ({n[0]} cells)")
    return Uncertainty(sigma_fssc=np.asarray(data["sigma_fssc"], float), sigma_fssh=np.asarray(data["sigma_fssh"], float),
                       method=str(data["method"]), never_visible=np.asarray(data["never_visible"], bool), **bounds)
