"""Sphinx configuration of sparktf's documentation site (``make docs``).

The PyData convention, as pyspark and pandas have it: Sphinx with ``pydata-sphinx-theme``,
pages in Markdown (``myst-parser``), the notebooks with their stored outputs (``myst-nb``),
the API reference from the docstrings (autodoc).
Built with warnings as errors (``-W``) in ``make test``'s lint step.
"""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import sparktf  # noqa: E402  (the checkout's, for its version)

project = "sparktf"
author = "the sparktf authors"
copyright = "2026, the sparktf authors"
release = sparktf.__version__

# myst_nb: the Markdown pages (it brings myst_parser) and the notebooks, shown with the
# outputs stored in them (scripts/store_notebooks.py; the suite checks they are current)
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
nb_execution_mode = "off"
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
html_static_path = ["_static"]
html_css_files = ["sparktf.css"]
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
