"""Sphinx configuration of sparktf's documentation site (``make docs``).

The PyData convention, as pyspark and pandas have it: Sphinx with ``pydata-sphinx-theme``,
pages in Markdown (``myst-parser``), the API reference from the docstrings (autodoc).
Built with warnings as errors (``-W``) in ``make test``'s lint step.
"""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "sparktf"
author = "the sparktf authors"
copyright = "2026, the sparktf authors"
release = "0.1.0"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon",
              "sphinx.ext.viewcode"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

# the docstrings: numpy sections (Parameters, Examples), the signature as written
napoleon_numpy_docstring = True
napoleon_google_docstring = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "show-inheritance": False}
# TensorFlow is never imported by `import sparktf` (it stays lazy): nothing to mock.

html_theme = "pydata_sphinx_theme"
html_title = "sparktf"
html_static_path = []
html_theme_options = {
    "navigation_depth": 2,
    "show_toc_level": 2,
    "navbar_align": "left",
    "footer_start": ["copyright"],
    "footer_end": [],
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}
html_show_sourcelink = False
