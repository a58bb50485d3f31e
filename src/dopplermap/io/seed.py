"""The seed's problem files (three pickles) and a safe NPZ problem format.

The user's script keeps its problem in three pickled dicts::

    idc   times            sequence of epoch keys (any hashable), in fitting order
          vels             (n_vel,) velocity grid, km/s, increasing
          data[t]['prf']   (n_vel,) observed profile, normalised by its mean
          data[t]['errs']  (n_vel,) or scalar 1-sigma errors
    sg    noes             n_cell, number of surface elements
          grid_areas       (n_cell,) element areas (any unit: only ratios matter)
          grid_lats, grid_longs   optional (n_cell,) element centres, rad
    cpcs  common[t]        ivis (n_vis,) int indices of the visible elements,
                           areas, mus (n_vis,)
          line[t]          ldfs_k (n_vis,), lis_k scalar or (n_vis,), lps_k (n_vis, n_vel)
                           for k in phot, cool, hot

:func:`read_seed` turns them into a dense :class:`~dopplermap.forms.DenseForm`
(``weight = lis * ldfs * areas * mus``, ``local = lps``; epochs with fewer visible
elements are padded with zero weight) plus :class:`~dopplermap.objective.Observations`,
so that ``dopplermap.objective.loss(x, lmbd, pre, obs, regulariser="mem")`` is the seed's
``loss(x, lmbd)`` on every feasible ``x``. Unpickling runs code from the file, so it needs
``trust_pickle=True``; :func:`save_problem` writes the same problem as a plain NPZ that
:func:`load_problem` reads without that opt-in. :func:`write_seed_pickles` goes the other
way, from a :class:`~dopplermap.simulate.Simulation`.
"""

from __future__ import annotations

import dataclasses
import pickle
import zipfile
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from .. import _device, choices
from ..atomic import write_file
from ..errors import DopplermapInputError, MissingFileError, reader
from ..forms import FORMS, DenseForm
from ..geometry import Rotation, cell_geometry
from ..model import Precomputed
from ..objective import Observations
from .seed_arrays import (
    COMPONENT_NAMES,
    SeedArrays,
    UntrustedPickleError,
    load_pickle,
    read_seed_arrays,
    seed_arrays,
)

__all__ = ["SeedProblem", "UntrustedPickleError", "load_pickle", "read_seed", "seed_problem", "problem_from_arrays",
           "seed_dicts", "write_seed_pickles", "save_problem", "load_problem", "PROBLEM_FORMAT", "COMPONENT_NAMES"]
PROBLEM_FORMAT = "dopplermap-problem"
PROBLEM_VERSION = 1
_LINE_FIELDS = ("vels", "cell", "pos", "weight", "beta", "jbase", "kernel", "local")


@dataclasses.dataclass(frozen=True, eq=False)
class SeedProblem:
    """A complete inversion problem: precomputed model, observations and labels.

    Attributes:
        pre: :class:`~dopplermap.model.Precomputed` (``cell_area`` = the seed's
            ``grid_areas``; ``edges`` empty (0, 2) when unknown).
        obs: :class:`~dopplermap.objective.Observations` (the seed's profiles as given).
        labels: (n_epoch,) epoch keys as text, in the order of ``idc['times']``.
        n_visible: (n_epoch,) number of visible cells per epoch.
        lat, lon: (n_cell,) cell centres, rad, or None when the files hold none.
        source: where the problem came from (for messages and result files).
    """

    pre: Precomputed
    obs: Observations
    labels: tuple
    n_visible: np.ndarray
    lat: np.ndarray | None = None
    lon: np.ndarray | None = None
    source: str = ""

    @property
    def n_cell(self) -> int:
        return self.pre.n_cell

    @property
    def n_epoch(self) -> int:
        return self.pre.n_epoch

    @property
    def n_vel(self) -> int:
        return self.pre.n_vel

    @property
    def has_coordinates(self) -> bool:
        return self.lat is not None and self.lon is not None


# ---------------------------------------------------------------- pickles

def problem_from_arrays(a: SeedArrays) -> SeedProblem:
    """The :class:`SeedProblem` of checked arrays (:func:`~dopplermap.io.seed_arrays.seed_arrays`),
    on the device; the dense cube is handed over without a copy where the device can adopt it."""
    lm = DenseForm(vels=_device.asarray(a.vels), cell=_device.asarray(a.cell), pos=_device.asarray(a.pos),
                   weight=_device.asarray(a.weight), local=_device.asarray(a.local))
    pre = Precomputed(line=lm, cell_area=_device.asarray(a.cell_area),
                      edges=_device.asarray(np.zeros((0, 2), np.int32)))
    s_idc, s_sg, s_cpcs = a.sources
    obs = Observations.create(a.times, a.vels, a.flux, a.err, source=s_idc)
    return SeedProblem(pre=pre, obs=obs, labels=a.labels, n_visible=a.n_visible, lat=a.lat, lon=a.lon,
                       source=f"{s_idc}, {s_sg}, {s_cpcs}")


def seed_problem(idc, sg, cpcs, *, sources=("idc", "sg", "cpcs")) -> SeedProblem:
    """Build the dense problem from the seed's three dicts (already unpickled).

    Args:
        idc, sg, cpcs: the seed's dicts (layout in the module docstring); arrays may be
            numpy or JAX, ``lis_*`` scalar or per visible cell.
        sources: names of the three inputs for error messages (e.g. file names).
    Returns:
        :class:`SeedProblem` with a ``method="dense"`` line model.
    """
    # the cube is most of the input's bytes: written once, into a buffer the device adopts
    return problem_from_arrays(seed_arrays(idc, sg, cpcs, sources=sources, alloc=_device.host_array))


def read_seed(idc, sg, cpcs, *, trust_pickle: bool = False) -> SeedProblem:
    """Read the seed's three pickles (paths, or dicts already loaded) into a :class:`SeedProblem`.

    Pickles are only opened with ``trust_pickle=True`` (unpickling can execute code).
    """
    return problem_from_arrays(read_seed_arrays(idc, sg, cpcs, trust_pickle=trust_pickle, alloc=_device.host_array))


# ---------------------------------------------------------------- writer (from a simulation)

def seed_dicts(sim, *, keys=None, per_cell_lis: bool = False, as_jax: bool = False,
               coordinates: bool = True, limb: str = "smooth"):
    """The seed's ``(idc, sg, cpcs)`` dicts for a :class:`~dopplermap.simulate.Simulation`.

    The coefficients are those of ``dopplermap.precompute(..., method="dense", limb=limb)`` for
    the simulation's grid, star and components, so the two models agree to rounding. The
    seed reads ``mus`` only as the weight's projected-area factor, so ``mus`` holds the limb
    weight (``mu`` itself away from the limb; with ``limb="smooth"`` the cell-averaged
    :func:`~dopplermap.geometry.limb_weight` within ``h`` of it, where ``mu`` may be <= 0), and
    ``ldfs`` the limb darkening at :class:`~dopplermap.geometry.CellGeometry`'s ``ld_mu``.

    Args:
        sim: the simulation (grid, star, components, observations).
        keys: (n_epoch,) hashable epoch keys; default the epoch times (Python floats).
        per_cell_lis: write ``lis_*`` as (n_vis,) arrays instead of scalars.
        as_jax: store JAX arrays instead of numpy arrays.
        coordinates: include ``grid_lats`` / ``grid_longs`` (rad) in ``sg``.
        limb: ``"smooth"`` (default, as precompute's) or ``"sharp"`` (the seed's ``mu > 0``).
    """
    grid, star, comps, obs = sim.grid, sim.star, sim.components, sim.obs
    times = np.asarray(obs.times, dtype=float)
    vels = np.asarray(obs.vels, dtype=float)
    keys = [float(t) for t in times] if keys is None else list(keys)
    if len(keys) != times.size or len(set(keys)) != len(keys):
        raise DopplermapInputError(f"keys must be {times.size} distinct hashable values, got {len(keys)} ({len(set(keys))} distinct)")
    geo = cell_geometry(grid, times, Rotation.of(star), xp=np, limb=limb, surface=grid.surface)
    # a distorted surface's cells: their surface areas, as the geometry weighs them
    areas = np.asarray(grid.area if grid.surface is None else grid.surface.area, dtype=float)
    weight = np.asarray(geo.proj_area) / areas[None, :]  # the limb weight
    v_los = np.asarray(geo.v_los)
    arr = jnp.asarray if as_jax else np.asarray
    flux = np.asarray(obs.flux)
    err = np.asarray(obs.err)
    idc = {"times": list(keys), "vels": arr(vels), "data": {}}
    sg = {"noes": int(grid.n_cell), "grid_areas": arr(np.asarray(areas, dtype=float))}
    if coordinates:
        sg["grid_lats"] = arr(np.asarray(grid.lat, dtype=float))
        sg["grid_longs"] = arr(np.asarray(grid.lon, dtype=float))
    cpcs = {"common": {}, "line": {}}
    for e, t in enumerate(keys):
        idc["data"][t] = {"prf": arr(flux[e]), "errs": arr(err[e])}
        ivis = np.nonzero(np.asarray(geo.visible)[e])[0]
        mus = np.asarray(geo.ld_mu)[e, ivis]
        cpcs["common"][t] = {"ivis": arr(ivis), "areas": arr(areas[ivis]), "mus": arr(weight[e, ivis])}
        entry = {}
        for name, comp in zip(COMPONENT_NAMES, comps, strict=True):
            entry[f"ldfs_{name}"] = arr(np.asarray(comp.limb_darkening(mus), dtype=float))
            entry[f"lis_{name}"] = arr(np.full(ivis.size, float(comp.intensity))) if per_cell_lis else float(comp.intensity)
            entry[f"lps_{name}"] = arr(comp.profile(vels[None, :] - v_los[e, ivis][:, None]))
        cpcs["line"][t] = entry
    return idc, sg, cpcs


def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, write)


def write_seed_pickles(sim, out_dir, **kwargs) -> dict:
    """Write ``idc.pkl``, ``sg.pkl``, ``cpcs.pkl`` for ``sim`` into ``out_dir`` (atomically).

    Keyword arguments go to :func:`seed_dicts`. Returns ``{"idc": path, "sg": path, "cpcs": path}``.
    """
    out_dir = Path(out_dir)
    paths = {}
    for name, obj in zip(("idc", "sg", "cpcs"), seed_dicts(sim, **kwargs), strict=True):
        p = out_dir / f"{name}.pkl"
        _atomic_write(p, lambda fh, o=obj: pickle.dump(o, fh, protocol=pickle.HIGHEST_PROTOCOL))
        paths[name] = p
    return paths


# ---------------------------------------------------------------- safe NPZ problem format

def save_problem(path, problem: SeedProblem) -> Path:
    """Write ``problem`` to an NPZ (no pickled objects; read with :func:`load_problem`), atomically."""
    path = Path(path)
    lm = problem.pre.line
    if getattr(lm, "shift_kernel", None) is not None:  # the format has no place for it: it would load as another model
        raise DopplermapInputError(f"{path}: a binned model with rv_shift='exact' cannot be saved as a problem file")
    arrays = {"format": np.array(PROBLEM_FORMAT), "version": np.array(PROBLEM_VERSION),
              "method": np.array(lm.kind), "cell_area": np.asarray(problem.pre.cell_area),
              "edges": np.asarray(problem.pre.edges, dtype=np.int32).reshape(-1, 2),
              "times": np.asarray(problem.obs.times), "obs_vels": np.asarray(problem.obs.vels),
              "flux": np.asarray(problem.obs.flux), "err": np.asarray(problem.obs.err),
              "labels": np.array([str(s) for s in problem.labels], dtype=str),
              "source": np.array(str(problem.source))}
    for f in _LINE_FIELDS:
        v = getattr(lm, f, None)
        if v is not None:
            arrays[f"line_{f}"] = np.asarray(v)
    if problem.has_coordinates:
        arrays["lat"] = np.asarray(problem.lat, dtype=float)
        arrays["lon"] = np.asarray(problem.lon, dtype=float)
    _atomic_write(path, lambda fh: np.savez(fh, **arrays))
    return path


def _need(z, key, src, shape=None, kind="f"):
    if key not in z.files:
        raise DopplermapInputError(f"{src}: missing array {key!r}")
    a = z[key]
    if shape is not None and a.shape != tuple(shape):
        raise DopplermapInputError(f"{src}: array {key!r} has shape {a.shape}, expected {tuple(shape)}")
    if kind == "f":
        if not np.issubdtype(a.dtype, np.floating):
            raise DopplermapInputError(f"{src}: array {key!r} must be floating point, got dtype {a.dtype}")
        if not np.all(np.isfinite(a)):
            raise DopplermapInputError(f"{src}: array {key!r} has NaN/inf values")
    elif kind == "i" and not np.issubdtype(a.dtype, np.integer):
        raise DopplermapInputError(f"{src}: array {key!r} must be integer, got dtype {a.dtype}")
    return a


def _dense_arrays(z, src, n_epoch, n_slot, n_vel) -> dict:
    return {"local": jnp.asarray(_need(z, "line_local", src, shape=(n_epoch, n_slot, 3, n_vel)))}


def _binned_arrays(z, src, n_epoch, n_slot, n_vel) -> dict:
    kernel = _need(z, "line_kernel", src)
    if kernel.ndim != 3 or kernel.shape[1:] != (3, n_vel) or kernel.shape[0] < 4:
        raise DopplermapInputError(f"{src}: 'line_kernel' has shape {kernel.shape}, expected (n_bin, 3, {n_vel})")
    jbase = _need(z, "line_jbase", src, shape=(n_epoch, n_slot), kind="i")
    if np.any((jbase < 0) | (jbase > kernel.shape[0] - 4)):
        raise DopplermapInputError(f"{src}: 'line_jbase' has bins outside [0, {kernel.shape[0] - 4}]")
    return {"beta": jnp.asarray(_need(z, "line_beta", src, shape=(n_epoch, n_slot, 4))),
            "jbase": jnp.asarray(jbase.astype(np.int32)), "kernel": jnp.asarray(kernel),
            "cont": jnp.ones(3, kernel.dtype)}  # one column per component: mu-independent profiles


# the line arrays of each form (dopplermap.choices.FORMS) a problem file may hold, beyond vels/cell/pos/weight
_FORM_ARRAYS = {"dense": _dense_arrays, "binned": _binned_arrays}


@reader(".npz problem file")  # members are read lazily: a damaged one fails inside
def load_problem(path) -> SeedProblem:
    """Read an NPZ written by :func:`save_problem` (no code is executed; inputs are validated)."""
    path = Path(path)
    src = str(path)
    if not path.is_file():
        raise MissingFileError(f"{path}: no such file")
    if not zipfile.is_zipfile(path):  # else numpy takes it for a pickle and says so
        raise DopplermapInputError(f"{src}: not a .npz file (not a zip archive: cut short, or another kind of file)")
    try:
        z = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise DopplermapInputError(f"{src}: not a readable .npz problem file ({exc})") from None
    with z:
        if "format" not in z.files or str(z["format"]) != PROBLEM_FORMAT:
            raise DopplermapInputError(f"{src}: not a dopplermap problem file (no format tag {PROBLEM_FORMAT!r})")
        version = int(z["version"]) if "version" in z.files else -1
        if version != PROBLEM_VERSION:
            raise DopplermapInputError(f"{src}: problem format version {version} is not supported (expected {PROBLEM_VERSION})")
        method = str(_need(z, "method", src, kind=None))
        choices.check(method, choices.FORMS, f"{src}: method")
        vels = _need(z, "line_vels", src)
        if vels.ndim != 1 or vels.size < 3 or np.any(np.diff(vels) <= 0):
            raise DopplermapInputError(f"{src}: 'line_vels' must be a 1-D increasing array of >= 3 velocities")
        cell = _need(z, "line_cell", src, kind="i")
        if cell.ndim != 2:
            raise DopplermapInputError(f"{src}: 'line_cell' must be 2-D (n_epoch, n_slot), got shape {cell.shape}")
        n_epoch, n_slot = cell.shape
        cell_area = _need(z, "cell_area", src)
        if cell_area.ndim != 1 or np.any(cell_area <= 0):
            raise DopplermapInputError(f"{src}: 'cell_area' must be a 1-D array of positive areas")
        n_cell, n_vel = cell_area.size, vels.size
        pos = _need(z, "line_pos", src, shape=(n_epoch, n_cell), kind="i")
        weight = _need(z, "line_weight", src, shape=(n_epoch, n_slot, 3))
        if np.any((cell < 0) | (cell >= n_cell)):
            raise DopplermapInputError(f"{src}: 'line_cell' has indices outside [0, {n_cell})")
        if np.any((pos < 0) | (pos > n_slot)):
            raise DopplermapInputError(f"{src}: 'line_pos' has slots outside [0, {n_slot}]")
        vis = pos < n_slot
        back = np.take_along_axis(np.pad(cell, ((0, 0), (0, 1)), constant_values=-1), pos, axis=1)
        if np.any(vis & (back != np.arange(n_cell)[None, :])):
            raise DopplermapInputError(f"{src}: 'line_pos' is not the inverse of 'line_cell'")
        used = np.zeros((n_epoch, n_slot + 1), bool)
        np.put_along_axis(used, pos, True, axis=1)
        pad = ~used[:, :n_slot]  # slots no cell maps to
        if np.any(pad[..., None] & (weight != 0)):
            e, s_ = np.argwhere(pad & np.any(weight != 0, axis=-1))[0]
            raise DopplermapInputError(f"{src}: 'line_weight' must be 0 on padded slots; epoch {e}, slot {s_} is not")
        fields = dict(vels=jnp.asarray(vels), cell=jnp.asarray(cell.astype(np.int32)),
                      pos=jnp.asarray(pos.astype(np.int32)), weight=jnp.asarray(weight))
        fields.update(_FORM_ARRAYS[method](z, src, n_epoch, n_slot, n_vel))
        edges = _need(z, "edges", src, kind="i")
        if edges.ndim != 2 or edges.shape[1] != 2 or np.any((edges < 0) | (edges >= n_cell)):
            raise DopplermapInputError(f"{src}: 'edges' must be (n_edge, 2) cell indices in [0, {n_cell})")
        labels = _need(z, "labels", src, shape=(n_epoch,), kind=None)
        lat = lon = None
        if "lat" in z.files and "lon" in z.files:
            lat = _need(z, "lat", src, shape=(n_cell,))
            lon = _need(z, "lon", src, shape=(n_cell,))
        for key in ("flux", "err"):
            if key not in z.files:
                raise DopplermapInputError(f"{src}: missing array {key!r}")
        obs = Observations.create(_need(z, "times", src, shape=(n_epoch,)), _need(z, "obs_vels", src, shape=(n_vel,)),
                                  z["flux"], z["err"], source=src)
        source = str(z["source"]) if "source" in z.files else src
    pre = Precomputed(line=FORMS[method](**fields), cell_area=jnp.asarray(cell_area),
                      edges=jnp.asarray(edges.astype(np.int32)))
    return SeedProblem(pre=pre, obs=obs, labels=tuple(str(s) for s in labels), n_visible=vis.sum(axis=1),
                       lat=lat, lon=lon, source=source)
