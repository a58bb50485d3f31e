"""``dopplermap import-zdipy``: a dopplermap target (TOML + epochs table) from a ZDIpy set-up."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["register"]


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
        from ..app.zdipy import import_zdipy

        toml, epochs, lost = import_zdipy(inzdi, line_model, out, overwrite=overwrite, t_phot=5000.0 if teff is None else teff,
                                          t_cool=spot_teff, echo=lambda m: click.echo(m, err=True))
        if teff is None:
            click.echo("temperatures: photosphere 5000 K (ZDIpy has none; give the star's with --teff, the spots' "
                       "with --spot-teff)", err=True)
        click.echo("not carried over (also listed at the top of the TOML):")
        for item in lost:
            click.echo(f"  - {item}")
        click.echo(f"wrote {toml} and {epochs}; run: dopplermap invert {toml} --out results")
