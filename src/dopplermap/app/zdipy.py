"""``dopplermap import-zdipy``: a dopplermap target (TOML + epochs table) from a ZDIpy set-up."""

from __future__ import annotations

from pathlib import Path

from ..atomic import write_text
from ..config import load_config
from ..errors import DopplermapInputError, MissingFileError
from ..io.lsd import read_lsd
from ..io.zdipy import observed_equivalent_width, read_inzdi, read_zdipy_line, to_target

__all__ = ["import_zdipy"]


def import_zdipy(inzdi, line_model=None, out="target.toml", *, overwrite: bool = False, t_phot: float = 5000.0,
                 t_cool: float | None = None, echo=print):
    """Write ``out`` (a dopplermap TOML) and ``<out stem>-epochs.csv`` beside it from ZDIpy's files.

    ``line_model`` defaults to ``model-voigt-line.dat`` next to ``inzdi`` when that exists.
    Profile files are checked (they must exist and read) and, when ZDIpy estimates the line
    strength from the equivalent width, their mean EW in the window sets
    ``[line] equivalent_width``. Existing files are refused unless ``overwrite``. Returns
    ``(toml path, epochs path, list of what was not carried over)``.
    """
    inzdi = Path(inzdi)
    cfg = read_inzdi(inzdi)
    notes = []
    if line_model is None:
        guess = inzdi.parent / "model-voigt-line.dat"
        line_model = guess if guess.is_file() else None
        notes.append(f"line model: {guess} (next to {inzdi.name})" if line_model is not None else
                     "no model-voigt-line.dat: a Gaussian placeholder line is written; give the line model to carry "
                     "ZDIpy's over")
    line = read_zdipy_line(line_model) if line_model is not None else None
    t_cool = t_phot - 1500.0 if t_cool is None else t_cool
    if not (t_phot > 0 and 0 < t_cool < t_phot):
        raise DopplermapInputError(f"--teff {t_phot!r} and --spot-teff {t_cool!r}: need 0 < spot-teff < teff (K)")
    profiles = []
    for name, ln in zip(cfg.files, cfg.file_lines, strict=True):
        p = inzdi.parent / name
        if not p.is_file():
            raise MissingFileError(f"{inzdi}:{ln}: profile file {name!r} not found (looked for {p})")
        prof = read_lsd(p)
        vr = cfg.v_r[len(profiles)]
        inside = int(((prof.vels >= cfg.vel_start + vr) & (prof.vels <= cfg.vel_end + vr)).sum())
        if inside < 3:
            raise DopplermapInputError(f"{inzdi}:{ln}: {name} has {inside} points in the window {cfg.vel_start:g}..{cfg.vel_end:g} "
                                       f"km/s around its centre Vr {vr:g} km/s (it covers {prof.vels[0]:g}..{prof.vels[-1]:g})")
        profiles.append(prof)
    ew = None
    if cfg.estimate_strength:
        ew = observed_equivalent_width(profiles, cfg.v_r, cfg.vel_start, cfg.vel_end)
    out = Path(out)
    if out.suffix.lower() != ".toml":
        raise DopplermapInputError(f"--out {out}: the target file must end in .toml")
    if not out.parent.is_dir():
        raise MissingFileError(f"--out {out}: folder {out.parent} does not exist")
    epochs = out.with_name(f"{out.stem}-epochs.csv")
    for p in (out, epochs):
        if p.exists() and not overwrite:
            raise DopplermapInputError(f"{p} exists; use --overwrite to overwrite it")
    toml_text, epochs_text, lost = to_target(cfg, line, out, epochs_name=epochs.name, t_phot=t_phot, t_cool=t_cool,
                                             ew=ew)
    write_text(epochs, epochs_text)
    write_text(out, toml_text)
    load_config(out)  # what we wrote must load as it is
    for n in notes:
        echo(n)
    return out, epochs, lost
