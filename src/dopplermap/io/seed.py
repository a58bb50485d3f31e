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
import numbers
import os
import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from .. import _device, choices
from ..atomic import write_file
from ..errors import DopplermapInputError, MissingFileError, reader
from ..forms import FORMS, DenseForm
from ..geometry import cell_geometry
from ..model import Precomputed
from ..objective import Observations

__all__ = ["SeedProblem", "UntrustedPickleError", "load_pickle", "read_seed", "seed_problem", "seed_dicts",
           "write_seed_pickles", "save_problem", "load_problem", "PROBLEM_FORMAT", "COMPONENT_NAMES"]

COMPONENT_NAMES = ("phot", "cool", "hot")
PROBLEM_FORMAT = "dopplermap-problem"
PROBLEM_VERSION = 1
_LINE_FIELDS = ("vels", "cell", "pos", "weight", "beta", "jbase", "kernel", "local")


class UntrustedPickleError(DopplermapInputError):
    """Raised when a pickle would be loaded without ``trust_pickle=True``."""


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

def _trust_message(path) -> str:
    return (f"refusing to unpickle {path}: loading a pickle runs whatever code the file contains. "
            "If you made this file or trust its source, opt in with trust_pickle=True "
            "(CLI: --trust-pickle); `dopplermap convert --trust-pickle ...` writes the problem once "
            "to a safe .npz that later runs read without the opt-in")


@reader("pickle")
def load_pickle(path, *, trust_pickle: bool = False):
    """Unpickle ``path`` (only with ``trust_pickle=True``; unpickling can execute code)."""
    path = Path(path)
    if not trust_pickle:
        raise UntrustedPickleError(_trust_message(path))
    if not path.is_file():
        raise MissingFileError(f"{path}: no such file")
    try:
        with path.open("rb") as fh:
            return pickle.load(fh)
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError, TypeError) as exc:
        raise DopplermapInputError(f"{path}: not a readable pickle ({type(exc).__name__}: {exc})") from None


def _key_text(k) -> str:
    if isinstance(k, np.generic):
        k = k.item()
    return repr(k)


def _get(mapping, key, where: str, src: str):
    if not isinstance(mapping, Mapping):
        raise DopplermapInputError(f"{src}: {where} must be a dict, got {type(mapping).__name__}")
    try:
        return mapping[key]
    except (KeyError, TypeError):
        raise DopplermapInputError(f"{src}: missing key {where}[{_key_text(key)}]") from None


def _floats(value, where: str, src: str, shape=None, allow_scalar=False) -> np.ndarray:
    """Float64 array from ``value``; checks shape (or scalar) and finiteness."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DopplermapInputError(f"{src}: {where} is not numeric ({exc})") from None
    if shape is not None and arr.shape != tuple(shape) and not (allow_scalar and arr.ndim == 0):
        want = f"{tuple(shape)}" + (" or a scalar" if allow_scalar else "")
        raise DopplermapInputError(f"{src}: {where} has shape {arr.shape}, expected {want}")
    bad = ~np.isfinite(arr)
    if bad.any():
        first = np.argwhere(bad)[0] if arr.ndim else ()
        at = f" first at index {tuple(int(i) for i in first)}" if arr.ndim else ""
        raise DopplermapInputError(f"{src}: {where} has {int(bad.sum())} NaN/inf value(s),{at}".rstrip(","))
    return arr


def _epoch_keys(times, src: str) -> list:
    if isinstance(times, (list, tuple)):
        keys = list(times)
    elif hasattr(times, "__array__") or isinstance(times, np.ndarray):
        arr = np.asarray(times)
        if arr.ndim != 1:
            raise DopplermapInputError(f"{src}: idc['times'] must be 1-D, got shape {arr.shape}")
        keys = arr.tolist()
    else:
        try:
            keys = list(times)
        except TypeError:
            raise DopplermapInputError(f"{src}: idc['times'] must be a sequence of epoch keys, got {type(times).__name__}") from None
    if not keys:
        raise DopplermapInputError(f"{src}: idc['times'] is empty")
    seen = {}
    for i, k in enumerate(keys):
        try:
            hash(k)
        except TypeError:
            raise DopplermapInputError(f"{src}: idc['times'][{i}] = {k!r} is not hashable, so it cannot be a dict key") from None
        if k in seen:
            raise DopplermapInputError(f"{src}: idc['times'] repeats the key {_key_text(k)} (positions {seen[k]} and {i})")
        seen[k] = i
    return keys


def _numeric_times(keys) -> np.ndarray:
    if all(isinstance(k, numbers.Real) and not isinstance(k, bool) for k in keys):
        t = np.asarray([float(k) for k in keys])
        if np.all(np.isfinite(t)):
            return t
    return np.arange(len(keys), dtype=np.float64)


def seed_problem(idc, sg, cpcs, *, sources=("idc", "sg", "cpcs")) -> SeedProblem:
    """Build the dense problem from the seed's three dicts (already unpickled).

    Args:
        idc, sg, cpcs: the seed's dicts (layout in the module docstring); arrays may be
            numpy or JAX, ``lis_*`` scalar or per visible cell.
        sources: names of the three inputs for error messages (e.g. file names).
    Returns:
        :class:`SeedProblem` with a ``method="dense"`` line model.
    """
    s_idc, s_sg, s_cpcs = (str(s) for s in sources)
    for obj, name, src in ((idc, "idc", s_idc), (sg, "sg", s_sg), (cpcs, "cpcs", s_cpcs)):
        if not isinstance(obj, Mapping):
            raise DopplermapInputError(f"{src}: expected the {name} dict, got {type(obj).__name__}")

    keys = _epoch_keys(_get(idc, "times", "idc", s_idc), s_idc)
    vels = _floats(_get(idc, "vels", "idc", s_idc), "idc['vels']", s_idc)
    if vels.ndim != 1 or vels.size < 3:
        raise DopplermapInputError(f"{s_idc}: idc['vels'] must be 1-D with >= 3 velocities, got shape {vels.shape}")
    if np.any(np.diff(vels) <= 0):
        i = int(np.argmax(np.diff(vels) <= 0))
        raise DopplermapInputError(f"{s_idc}: idc['vels'] must increase, but vels[{i}]={vels[i]!r} >= vels[{i + 1}]={vels[i + 1]!r}")
    n_vel = vels.size
    data = _get(idc, "data", "idc", s_idc)

    noes_raw = np.asarray(_get(sg, "noes", "sg", s_sg))
    if (noes_raw.ndim != 0 or not np.issubdtype(noes_raw.dtype, np.number) or not np.isfinite(noes_raw)
            or noes_raw != np.round(noes_raw) or noes_raw < 1):
        raise DopplermapInputError(f"{s_sg}: sg['noes'] must be a positive integer, got {noes_raw!r}")
    n_cell = int(noes_raw)
    areas_all = _floats(_get(sg, "grid_areas", "sg", s_sg), "sg['grid_areas']", s_sg, shape=(n_cell,))
    if np.any(areas_all <= 0):
        i = int(np.argmax(areas_all <= 0))
        raise DopplermapInputError(f"{s_sg}: sg['grid_areas'] must be > 0, got {areas_all[i]!r} at index {i}")
    lat = lon = None
    if isinstance(sg, Mapping) and "grid_lats" in sg and "grid_longs" in sg:
        lat = _floats(sg["grid_lats"], "sg['grid_lats']", s_sg, shape=(n_cell,))
        lon = _floats(sg["grid_longs"], "sg['grid_longs']", s_sg, shape=(n_cell,))

    common = _get(cpcs, "common", "cpcs", s_cpcs)
    line = _get(cpcs, "line", "cpcs", s_cpcs)

    n_epoch = len(keys)
    flux = np.empty((n_epoch, n_vel))
    err = np.empty((n_epoch, n_vel))
    per_epoch = []
    for e, t in enumerate(keys):
        kt = _key_text(t)
        d = _get(data, t, "idc['data']", s_idc)
        flux[e] = _floats(_get(d, "prf", f"idc['data'][{kt}]", s_idc), f"idc['data'][{kt}]['prf']", s_idc,
                          shape=(n_vel,))
        errs = _floats(_get(d, "errs", f"idc['data'][{kt}]", s_idc), f"idc['data'][{kt}]['errs']", s_idc,
                       shape=(n_vel,), allow_scalar=True)
        if np.any(errs <= 0):
            raise DopplermapInputError(f"{s_idc}: idc['data'][{kt}]['errs'] must be > 0, got {float(np.min(errs))!r}")
        err[e] = errs

        com = _get(common, t, "cpcs['common']", s_cpcs)
        ivis_raw = np.asarray(_get(com, "ivis", f"cpcs['common'][{kt}]", s_cpcs))
        where = f"cpcs['common'][{kt}]['ivis']"
        if ivis_raw.ndim != 1 or ivis_raw.size == 0:
            raise DopplermapInputError(f"{s_cpcs}: {where} must be a non-empty 1-D index array, got shape {ivis_raw.shape}")
        if not np.issubdtype(ivis_raw.dtype, np.integer):
            raise DopplermapInputError(f"{s_cpcs}: {where} must hold integer cell indices, got dtype {ivis_raw.dtype}")
        ivis = ivis_raw.astype(np.int64)
        bad = (ivis < 0) | (ivis >= n_cell)
        if bad.any():
            i = int(np.argmax(bad))
            raise DopplermapInputError(f"{s_cpcs}: {where}[{i}] = {int(ivis[i])} is out of range [0, {n_cell}) "
                             f"(sg['noes'] = {n_cell}; {int(bad.sum())} bad indices)")
        uniq, counts = np.unique(ivis, return_counts=True)
        if np.any(counts > 1):
            raise DopplermapInputError(f"{s_cpcs}: {where} lists cell {int(uniq[np.argmax(counts > 1)])} more than once")
        n_vis = ivis.size
        areas = _floats(_get(com, "areas", f"cpcs['common'][{kt}]", s_cpcs), f"cpcs['common'][{kt}]['areas']",
                        s_cpcs, shape=(n_vis,), allow_scalar=True)
        mus = _floats(_get(com, "mus", f"cpcs['common'][{kt}]", s_cpcs), f"cpcs['common'][{kt}]['mus']",
                      s_cpcs, shape=(n_vis,), allow_scalar=True)
        ln = _get(line, t, "cpcs['line']", s_cpcs)
        weights, locals_ = [], []
        for k in COMPONENT_NAMES:
            base = f"cpcs['line'][{kt}]"
            lis = _floats(_get(ln, f"lis_{k}", base, s_cpcs), f"{base}['lis_{k}']", s_cpcs, shape=(n_vis,),
                          allow_scalar=True)
            ldfs = _floats(_get(ln, f"ldfs_{k}", base, s_cpcs), f"{base}['ldfs_{k}']", s_cpcs, shape=(n_vis,),
                           allow_scalar=True)
            lps = _floats(_get(ln, f"lps_{k}", base, s_cpcs), f"{base}['lps_{k}']", s_cpcs, shape=(n_vis, n_vel))
            weights.append(np.broadcast_to(lis * ldfs * areas * mus, (n_vis,)))  # the seed's coeffs_k
            locals_.append(lps)  # the pickle's own arrays: copied once, into the cube below
        per_epoch.append((ivis, np.stack(weights, axis=1), locals_))

    n_visible = np.array([p[0].size for p in per_epoch], dtype=np.int64)
    n_slot = int(n_visible.max())
    cell = np.zeros((n_epoch, n_slot), np.int32)
    pos = np.full((n_epoch, n_cell), n_slot, np.int32)
    weight = np.zeros((n_epoch, n_slot, 3))
    # the cube is most of the input's bytes: written once, into a buffer the device adopts
    local = _device.host_array((n_epoch, n_slot, 3, n_vel))
    for e, (ivis, w, lps) in enumerate(per_epoch):
        n = ivis.size
        cell[e, :n] = ivis
        pos[e, ivis] = np.arange(n, dtype=np.int32)
        weight[e, :n] = w
        for k, lp in enumerate(lps):
            local[e, :n, k] = lp
        local[e, n:] = 0.0
    bad_norm = (weight.sum(axis=(1, 2)) == 0)
    if bad_norm.any():
        e = int(np.argmax(bad_norm))
        raise DopplermapInputError(f"{s_cpcs}: epoch {_key_text(keys[e])} has zero total weight (lis * ldfs * areas * mus)")

    lm = DenseForm(vels=_device.asarray(vels), cell=_device.asarray(cell), pos=_device.asarray(pos),
                   weight=_device.asarray(weight), local=_device.asarray(local))
    pre = Precomputed(line=lm, cell_area=_device.asarray(areas_all), edges=_device.asarray(np.zeros((0, 2), np.int32)))
    obs = Observations.create(_numeric_times(keys), vels, flux, err, source=s_idc)
    return SeedProblem(pre=pre, obs=obs, labels=tuple(_key_text(k) for k in keys), n_visible=n_visible,
                       lat=lat, lon=lon, source=f"{s_idc}, {s_sg}, {s_cpcs}")


def read_seed(idc, sg, cpcs, *, trust_pickle: bool = False) -> SeedProblem:
    """Read the seed's three pickles (paths, or dicts already loaded) into a :class:`SeedProblem`.

    Pickles are only opened with ``trust_pickle=True`` (unpickling can execute code).
    """
    loaded, names = [], []
    for obj in (idc, sg, cpcs):
        if isinstance(obj, (str, os.PathLike)):
            loaded.append(load_pickle(obj, trust_pickle=trust_pickle))
            names.append(str(obj))
        else:
            loaded.append(obj)
            names.append(None)
    names = [n or d for n, d in zip(names, ("idc", "sg", "cpcs"), strict=True)]
    return seed_problem(*loaded, sources=tuple(names))


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
    geo = cell_geometry(grid.lat, grid.lon, grid.area, times, star.inclination, star.vsini_kms, star.period,
                        star.t0, star.domega, xp=np, limb=limb, surface=grid.surface)
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
