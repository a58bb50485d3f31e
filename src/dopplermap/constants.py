"""Physical constants (SI unless the name says otherwise)."""

C_KMS = 299_792.458  # speed of light, km/s
H_PLANCK = 6.626_070_15e-34  # J s
K_BOLTZMANN = 1.380_649e-23  # J / K
C_MS = 299_792_458.0  # m / s
R_SUN_KM = 695_700.0  # nominal solar radius, km
G_SI = 6.674_30e-11  # m^3 kg^-1 s^-2
M_SUN_KG = 1.988_409_87e30  # kg
DAY_S = 86_400.0  # s

# The seed's bounds on the filling factors and the default map of its entropy term.
FILL_MIN = 1e-5
FILL_MAX = 1.0 - 1e-5

MAX_SUBDIVIDE = 8
"""Most sub-cells per side of a map cell (``[grid] subdivide``, :func:`dopplermap.grid.subdivide`)."""

# The smallest solver tolerance at which cube_dtype="auto" iterates on a float32 cube (its
# rounding of the loss, ~1e-7 relative, lies below it); here so that the warnings need no JAX.
FLOAT32_MIN_TOL = 1e-6
