"""Write dopplermap's TESS passband response from the TESS Science Office's published curve.

Source: ``tess-response-function-v2.0.csv`` of the TESS Science Office (Ricker et al. 2015,
JATIS 1, 014003), distributed by the mission (https://heasarc.gsfc.nasa.gov/docs/tess/ ,
"TESS spectral response function"): wavelength (nm) and the relative system response. The
shipped subset was made from a public copy of that file (columns ``wl,rpf``, every 2 nm from
300 to 2000 nm); rerun this script on the mission's own file to check it. The subset keeps the rows where the response is not zero
and one zero row at each end; values unchanged. Usage::

    python tools/subset_tess_response.py path/to/tess-response-function-v2.0.csv \
        src/dopplermap/data/tess_response_v2.csv
"""

from __future__ import annotations

import sys

HEADER = """\
# TESS spectral response function v2.0 (TESS Science Office; Ricker et al. 2015, JATIS 1, 014003):
# wavelength (nm), relative response; the rows with a non-zero response and one zero row at each
# end, values unchanged. Written by tools/subset_tess_response.py.
"""


def main(src: str, dst: str) -> None:
    rows = []
    with open(src, encoding="ascii") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#") or not line[0].isdigit():
                continue  # comments and the column names
            wl, resp = (float(x) for x in line.split(",")[:2])
            rows.append((wl, resp, line))
    nonzero = [i for i, (_, r, _) in enumerate(rows) if r > 0]
    lo, hi = max(nonzero[0] - 1, 0), min(nonzero[-1] + 1, len(rows) - 1)
    with open(dst, "w", encoding="ascii") as f:
        f.write(HEADER)
        f.write("wavelength_nm,response\n")
        f.write("\n".join(f"{wl:g},{r:g}" for wl, r, _ in rows[lo:hi + 1]) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
