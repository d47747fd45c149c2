"""MkDocs hook: take the navigation from the renderer instead of typing it into mkdocs.yml.

Which campaigns (and so which pages) exist is only known once the raw store has been analysed, so a static
``nav:`` in mkdocs.yml would drift from the pages. ``analysis.report.render.render_site`` writes the nav it
produced to ``<docs_dir>/.nav.json`` (a dot file: MkDocs never publishes it); this hook hands it to MkDocs.
Loaded by MkDocs from its path, never imported as a package (``site`` is a stdlib name).
"""

from __future__ import annotations

import json
from pathlib import Path

from mkdocs.exceptions import PluginError

NAV_FILE = ".nav.json"


def on_config(config):
    nav_path = Path(config["docs_dir"]) / NAV_FILE
    if not nav_path.exists():
        raise PluginError(
            f"{nav_path}: missing; render the pages first: python site/render.py (or nox -s site)"
        )
    config["nav"] = json.loads(nav_path.read_text(encoding="utf-8"))
    return config
