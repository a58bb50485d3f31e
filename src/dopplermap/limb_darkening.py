"""Limb-darkening laws: the law, its coefficients and their check, NumPy or JAX to evaluate.

Kept apart from :mod:`dopplermap.profiles` (which loads JAX and SciPy) so that the
configuration checks of ``dopplermap init`` and friends use this one rule without them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .errors import DopplermapInputError

__all__ = ["LimbDarkening"]


@dataclasses.dataclass(frozen=True)
class LimbDarkening:
    """Limb-darkening law ``I(mu)/I(1)``.

    ``law``: ``"linear"`` (u): ``1 - u (1 - mu)``; ``"quadratic"`` (a, b):
    ``1 - a (1 - mu) - b (1 - mu)^2``; ``"sqrt"`` (c, d): ``1 - c (1 - mu) - d (1 - sqrt mu)``;
    ``"power2"`` (g, h): ``1 - g (1 - mu^h)`` (Hestroffer 1997; the law of Claret &
    Southworth's tables, :mod:`dopplermap.atmosphere`).
    """

    law: str = "linear"
    coeffs: tuple[float, ...] = (0.6,)

    def __post_init__(self):
        need = {"linear": 1, "quadratic": 2, "sqrt": 2, "power2": 2}
        if self.law not in need:
            raise DopplermapInputError(f"limb-darkening law must be one of {sorted(need)}, got {self.law!r}")
        if len(self.coeffs) != need[self.law]:
            raise DopplermapInputError(f"{self.law} limb darkening takes {need[self.law]} coefficient(s), got {self.coeffs!r}")
        if self.law == "power2" and not self.coeffs[1] > 0:
            raise DopplermapInputError(f"power2 limb darkening needs an exponent h > 0, got {self.coeffs!r}")

    def __call__(self, mu):
        """``I(mu)/I(1)``; NumPy in, NumPy out; JAX in, JAX out."""
        if isinstance(mu, (np.ndarray, float, int)):
            xp = np
        else:  # a JAX array (JAX is loaded then): keeps this module light for the config checks
            import jax.numpy as xp
        mu = xp.clip(mu, 0.0, 1.0)
        c = self.coeffs
        if self.law == "linear":
            return 1.0 - c[0] * (1.0 - mu)
        if self.law == "quadratic":
            return 1.0 - c[0] * (1.0 - mu) - c[1] * (1.0 - mu) ** 2
        if self.law == "power2":
            return 1.0 - c[0] * (1.0 - mu ** c[1])
        return 1.0 - c[0] * (1.0 - mu) - c[1] * (1.0 - xp.sqrt(mu))
