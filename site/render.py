"""Render the report pages: ``python site/render.py [--results build/results] [--raw raw ...] [--out DIR]``.

A script, not a package (``site`` is a stdlib module name); the work lives in ``analysis.report.render``
(also runnable as ``python -m analysis.report.render``). Then ``mkdocs build --strict`` builds ``public/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout without the package installed
    from analysis.report.render import main

    sys.exit(main())
