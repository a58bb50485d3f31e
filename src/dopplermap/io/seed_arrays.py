"""The seed's pickles read into plain NumPy arrays: the part of :mod:`dopplermap.io.seed` that
needs no JAX, so that it can run in a child interpreter while the parent imports JAX.

:func:`seed_arrays` checks the seed's three dicts and lays them out as the dense model's
arrays (:class:`SeedArrays`); :func:`read_seed_arrays` does it from the pickle files. On
systems with ``os.memfd_create`` (Linux) ``dopplermap invert-seed`` runs it in a child
(:func:`child_main`, started by :mod:`dopplermap.app.seed_read`) that writes the dense cube,
most of the input's bytes, straight into a shared memory file the parent maps and hands to
the device without a copy (:func:`from_child`): the pickles are read on the second core while
the parent imports JAX and SciPy.
"""

from __future__ import annotations

import dataclasses
import mmap
import numbers
import os
import pickle
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..errors import DopplermapError, DopplermapInputError, MissingFileError, reader

__all__ = ["SeedArrays", "UntrustedPickleError", "load_pickle", "seed_arrays", "read_seed_arrays", "child_main",
           "from_child", "COMPONENT_NAMES"]

COMPONENT_NAMES = ("phot", "cool", "hot")


class UntrustedPickleError(DopplermapInputError):
    """Raised when a pickle would be loaded without ``trust_pickle=True``."""


@dataclasses.dataclass(frozen=True, eq=False)
class SeedArrays:
    """The seed's problem as NumPy arrays, before they go to the device.

    ``vels`` (n_vel,); the dense model's ``cell`` (n_epoch, n_slot) int32, ``pos``
    (n_epoch, n_cell) int32, ``weight`` (n_epoch, n_slot, 3), ``local`` (n_epoch, n_slot,
    3, n_vel); ``cell_area`` (n_cell,); the observations ``times`` (n_epoch,), ``flux`` and
    ``err`` (n_epoch, n_vel); ``labels``, ``n_visible``, ``lat``/``lon`` (or None) and the
    three ``sources`` as in :class:`dopplermap.io.seed.SeedProblem`.
    """

    vels: np.ndarray
    cell: np.ndarray
    pos: np.ndarray
    weight: np.ndarray
    local: np.ndarray
    cell_area: np.ndarray
    times: np.ndarray
    flux: np.ndarray
    err: np.ndarray
    labels: tuple
    n_visible: np.ndarray
    lat: np.ndarray | None
    lon: np.ndarray | None
    sources: tuple


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


def seed_arrays(idc, sg, cpcs, *, sources=("idc", "sg", "cpcs"), alloc=None) -> SeedArrays:
    """Check the seed's three dicts (already unpickled) and lay them out as the dense model's arrays.

    Args:
        idc, sg, cpcs: the seed's dicts (layout in :mod:`dopplermap.io.seed`); arrays may be
            numpy or JAX, ``lis_*`` scalar or per visible cell.
        sources: names of the three inputs for error messages (e.g. file names).
        alloc: ``alloc(shape)`` gives the uninitialised float64 buffer of the dense cube
            (default ``numpy.empty``); every element is written here.
    Returns:
        :class:`SeedArrays`.
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
    # the cube is most of the input's bytes: written once, into the buffer the caller gives
    local = (alloc or np.empty)((n_epoch, n_slot, 3, n_vel))
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

    return SeedArrays(vels=vels, cell=cell, pos=pos, weight=weight, local=local, cell_area=areas_all,
                      times=_numeric_times(keys), flux=flux, err=err, labels=tuple(_key_text(k) for k in keys),
                      n_visible=n_visible, lat=lat, lon=lon, sources=(s_idc, s_sg, s_cpcs))


def read_seed_arrays(idc, sg, cpcs, *, trust_pickle: bool = False, alloc=None) -> SeedArrays:
    """:func:`seed_arrays` of the seed's three pickles (paths, or dicts already loaded).

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
    return seed_arrays(*loaded, sources=tuple(names), alloc=alloc)


# ---------------------------------------------------------------- the reading child

def _fd_alloc(fd: int):
    """An ``alloc`` for :func:`seed_arrays` that puts the cube in the shared memory file ``fd``."""
    def alloc(shape):
        size = int(np.prod(shape, dtype=np.int64)) * 8
        os.ftruncate(fd, size)
        return np.frombuffer(mmap.mmap(fd, size), np.float64).reshape(shape)

    return alloc


def child_main(argv) -> None:
    """The reading child: ``argv`` = ``[fd, idc, sg, cpcs]``; the cube goes into the shared
    memory file ``fd``, everything else to stdout as a pickle ``("ok", SeedArrays without
    local, (shape of local))`` or ``("error", the DopplermapError raised)``. An unexpected
    failure ends the child with a non-zero status, and the parent reads the files itself."""
    fd, paths = int(argv[0]), argv[1:4]
    try:
        a = read_seed_arrays(*paths, trust_pickle=True, alloc=_fd_alloc(fd))
        payload = ("ok", dataclasses.replace(a, local=None), a.local.shape)
    except DopplermapError as exc:
        payload = ("error", exc)
    sys.stdout.buffer.write(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown to wait for: the parent reads until EOF


def from_child(out: bytes, fd: int) -> SeedArrays:
    """The :class:`SeedArrays` the reading child sent (``out``, its stdout; ``fd``, the shared
    memory file it wrote the cube to); raises the error the child reported. The cube is the
    file's pages, mapped here (page-aligned: the CPU device adopts it without a copy)."""
    payload = pickle.loads(out)  # noqa: S301  (this process's own child, started with the trusted paths)
    if payload[0] == "error":
        raise payload[1]
    _, arrays, shape = payload
    size = int(np.prod(shape, dtype=np.int64)) * 8
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    local = np.frombuffer(mmap.mmap(fd, size, flags=flags), np.float64).reshape(shape)
    return dataclasses.replace(arrays, local=local)
