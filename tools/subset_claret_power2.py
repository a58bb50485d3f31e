"""Write dopplermap's passband limb-darkening table from Claret & Southworth (2023).

Source: VizieR catalogue J/A+A/674/A63, ``table1.dat`` (power-2 law
``I(mu)/I(1) = 1 - g (1 - mu^h)``, PHOENIX-COND spherical models, solar metallicity,
microturbulence 2 km/s, truncation method M1; Teff 2300-12000 K, log g 0-6), from
Claret A., Southworth J., 2023, A&A 674, A63 (2023A&A...674A..63C). Fetch it from
https://cdsarc.cds.unistra.fr/viz-bin/cat/J/A+A/674/A63 and cite the paper when you use
the coefficients.

The subset keeps log g, Teff and the coefficients g and h of the Gaia (G, BP, RP), Kepler
and TESS passbands (the columns of the catalogue's byte-by-byte description), as written,
without any change of value. Usage::

    python tools/subset_claret_power2.py path/to/table1.dat src/dopplermap/data/claret2023_power2.csv
"""

from __future__ import annotations

import sys

# (name, first byte, last byte) of the catalogue's ReadMe, 1-based and inclusive
COLUMNS = [("logg", 1, 5), ("teff", 7, 12), ("Z", 14, 17), ("vturb", 19, 22),
           ("g_Gaia_BP", 24, 35), ("g_Gaia_G", 37, 48), ("g_Gaia_RP", 50, 61), ("g_Kepler", 63, 74),
           ("g_TESS", 76, 87),
           ("h_Gaia_BP", 102, 113), ("h_Gaia_G", 115, 126), ("h_Gaia_RP", 128, 139), ("h_Kepler", 141, 152),
           ("h_TESS", 154, 165)]
KEEP = ["logg", "teff"] + [c for c, _, _ in COLUMNS if c[:2] in ("g_", "h_")]
HEADER = """\
# Power-2 limb-darkening coefficients, I(mu)/I(1) = 1 - g (1 - mu^h), of PHOENIX-COND spherical
# model atmospheres (solar metallicity, microturbulence 2 km/s, truncation M1), for the Gaia G, BP,
# RP, Kepler and TESS passbands. Claret A., Southworth J., 2023, A&A 674, A63
# (2023A&A...674A..63C), VizieR J/A+A/674/A63 table1.dat: a column subset, values unchanged.
# Written by tools/subset_claret_power2.py; cite the paper when you use these numbers.
"""


def main(src: str, dst: str) -> None:
    rows = []
    with open(src, encoding="ascii") as f:
        for line in f:
            if not line.strip():
                continue
            rec = {name: line[a - 1:b].strip() for name, a, b in COLUMNS}
            if float(rec["Z"]) != 0.0 or float(rec["vturb"]) != 2.0:
                raise SystemExit(f"{src}: expected Z = 0 and vturb = 2 on every row, got {rec['Z']}, {rec['vturb']}")
            rows.append(",".join(rec[k] for k in KEEP))
    with open(dst, "w", encoding="ascii") as f:
        f.write(HEADER)
        f.write(",".join(KEEP) + "\n")
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
