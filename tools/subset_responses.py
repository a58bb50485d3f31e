"""Write dopplermap's Kepler, Gaia and Johnson-Cousins passband responses from maintained
packages' copies of the published curves.

Sources (the files inside the packages' wheels, as published on PyPI):

- Kepler: ``pyphot/libs/ascii_sources/kepler_kp.csv`` of pyphot 2.1.1 (MIT licence), the Kepler
  mission's high-resolution spectral response (Van Cleve & Caldwell, Kepler Instrument Handbook,
  KSCI-19033; ``kepler_response_hires1.txt`` of the Kepler Science Center), 348-970 nm every 1 nm.
  A second public copy (ELISa's ``Kepler.csv``, one more significant digit) agrees with it to its
  rounding.
- Gaia G, BP, RP: ``speclite/data/filters/gaiadr3-{G,BP,RP}.ecsv`` of speclite 1.0.0 (BSD-3-Clause),
  ESA's Gaia (E)DR3 passbands (Riello et al. 2021, A&A 649, A3;
  https://www.cosmos.esa.int/web/gaia/edr3-passbands), every 1 nm.
- Johnson-Cousins U, B, V, R, I: ``speclite/data/filters/bessell-{U,B,V,R,I}.ecsv`` of speclite
  1.0.0, Bessell's standard passbands (Bessell 1990, PASP 102, 1181, table 2; energy responses,
  normalised to a maximum of 1), every 5 or 10 nm.

The subsets keep the rows where the response is not zero and one zero row at each end (where
the source has one); the wavelengths are converted from Angstrom to nm (divided by 10), the
responses are written unchanged (the shortest decimal that reads back as the same
float64). The packages' licences are reproduced in ``src/dopplermap/data/NOTICE.md``. Usage::

    pip download --no-deps pyphot==2.1.1 speclite==1.0.0
    python tools/subset_responses.py pyphot-2.1.1-py3-none-any.whl speclite-1.0.0-py3-none-any.whl \
        src/dopplermap/data
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

HEADERS = {
    "kepler_response.csv": """\
# Kepler spectral response (high resolution; Van Cleve & Caldwell, Kepler Instrument Handbook,
# KSCI-19033): wavelength (nm), relative response; the rows with a non-zero response, values
# unchanged, from pyphot 2.1.1's kepler_kp.csv. Written by tools/subset_responses.py.
""",
    "bessell_{band}_response.csv": """\
# Johnson-Cousins {band} standard passband (Bessell 1990, PASP 102, 1181): wavelength (nm), energy
# response (for photon counting divide by the wavelength); values unchanged, from speclite 1.0.0's
# bessell-{band}.ecsv. Written by tools/subset_responses.py.
""",
    "gaia_dr3_{band}_response.csv": """\
# Gaia (E)DR3 {band} passband (ESA; Riello et al. 2021, A&A 649, A3): wavelength (nm), response; the
# rows with a non-zero response and one zero row at each end, values unchanged, from speclite
# 1.0.0's gaiadr3-{band}.ecsv. Written by tools/subset_responses.py.
""",
}


def _rows(text: str, sep: str | None):
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or not line[0].isdigit():
            continue  # comments, the ECSV header and the column names
        wl, resp = line.split(sep)[:2]
        rows.append((float(wl) / 10.0, resp.strip()))
    return rows


def _write(dst: Path, header: str, rows) -> None:
    nonzero = [i for i, (_, r) in enumerate(rows) if float(r) > 0]
    lo, hi = max(nonzero[0] - 1, 0), min(nonzero[-1] + 1, len(rows) - 1)
    with open(dst, "w", encoding="ascii") as f:
        f.write(header)
        f.write("wavelength_nm,response\n")
        f.write("\n".join(f"{wl:g},{float(r)!r}" for wl, r in rows[lo:hi + 1]) + "\n")  # repr: the same float64


def main(pyphot_wheel: str, speclite_wheel: str, out_dir: str) -> None:
    out = Path(out_dir)
    with zipfile.ZipFile(pyphot_wheel) as z:
        text = z.read("pyphot/libs/ascii_sources/kepler_kp.csv").decode("ascii")
    _write(out / "kepler_response.csv", HEADERS["kepler_response.csv"], _rows(text, ","))
    with zipfile.ZipFile(speclite_wheel) as z:
        for band in ("G", "BP", "RP"):
            text = z.read(f"speclite/data/filters/gaiadr3-{band}.ecsv").decode("ascii")
            name = f"gaia_dr3_{band}_response.csv"
            _write(out / name, HEADERS["gaia_dr3_{band}_response.csv"].format(band=band), _rows(text, None))
        for band in "UBVRI":
            text = z.read(f"speclite/data/filters/bessell-{band}.ecsv").decode("ascii")
            name = f"bessell_{band}_response.csv"
            _write(out / name, HEADERS["bessell_{band}_response.csv"].format(band=band), _rows(text, None))


if __name__ == "__main__":
    main(*sys.argv[1:4])
