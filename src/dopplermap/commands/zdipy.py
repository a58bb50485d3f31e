"""``dopplermap import-zdipy``: a dopplermap target (TOML + epochs table) from a ZDIpy set-up."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import DopplermapInputError, MissingFileError

__all__ = ["import_zdipy", "register"]


def _write_atomic(path: Path, text: str):
    from ..atomic import write_text

    write_text(path, text)


def import_zdipy(inzdi, line_model=None, out="target.toml", *, overwrite: bool = False, t_phot: float = 5000.0,
                 t_cool: float | None = None, echo=print):
    """Write ``out`` (a dopplermap TOML) and ``<out stem>-epochs.csv`` beside it from ZDIpy's files.

    ``line_model`` defaults to ``model-voigt-line.dat`` next to ``inzdi`` when that exists.
    Profile files are checked (they must exist and read) and, when ZDIpy estimates the line
    strength from the equivalent width, their mean EW in the window sets
    ``[line] equivalent_width``. Existing files are refused unless ``overwrite``. Returns
    ``(toml path, epochs path, list of what was not carried over)``.
    """
    from ..config import load_config
    from ..io.lsd import read_lsd
    from ..io.zdipy import observed_equivalent_width, read_inzdi, read_zdipy_line, to_target

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
    _write_atomic(epochs, epochs_text)
    _write_atomic(out, toml_text)
    load_config(out)  # what we wrote must load as it is
    for n in notes:
        echo(n)
    return out, epochs, lost


def register(group):
    @group.command("import-zdipy")
    @click.argument("inzdi", type=click.Path(dir_okay=False, path_type=Path))
    @click.argument("line_model", type=click.Path(dir_okay=False, path_type=Path), required=False)
    @click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("target.toml"),
                  show_default=True, help="Target TOML to write (an epochs table <stem>-epochs.csv goes beside it).")
    @click.option("--overwrite", is_flag=True, help="Overwrite an existing TOML / epochs table.")
    @click.option("--teff", type=float, default=None,
                  help="Photosphere temperature, K (ZDIpy has none; sets the spot contrast). Default 5000.")
    @click.option("--spot-teff", type=float, default=None, help="Cool-spot temperature, K (default: teff - 1500).")
    def import_zdipy_cmd(inzdi, line_model, out, overwrite, teff, spot_teff):
        """Convert ZDIpy's INZDI (inzdi.dat) and LINE_MODEL (model-voigt-line.dat) into a dopplermap target."""
        toml, epochs, lost = import_zdipy(inzdi, line_model, out, overwrite=overwrite, t_phot=5000.0 if teff is None else teff,
                                          t_cool=spot_teff, echo=lambda m: click.echo(m, err=True))
        if teff is None:
            click.echo("temperatures: photosphere 5000 K (ZDIpy has none; give the star's with --teff, the spots' "
                       "with --spot-teff)", err=True)
        click.echo("not carried over (also listed at the top of the TOML):")
        for item in lost:
            click.echo(f"  - {item}")
        click.echo(f"wrote {toml} and {epochs}; run: dopplermap invert {toml} --out results")
