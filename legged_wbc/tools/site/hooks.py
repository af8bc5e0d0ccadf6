"""MkDocs hooks (``mkdocs.yml``: ``hooks:``): the generated pages and the docstrings' Sphinx roles.

* ``on_files``: adds the API reference pages (:mod:`.api_pages`) as files of the build;
* ``on_page_markdown``: replaces ``<!-- parameter-tables -->`` with the tables of the parameter schema
  (:mod:`.parameter_tables`);
* ``on_page_content``: the docstrings' ``:func:`name``` roles shown as the code they name.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

from legged_wbc.tools.site import api_pages, parameter_tables

PARAMETER_TABLES = "<!-- parameter-tables -->"
_ROLE = re.compile(r":(?:mod|func|class|meth|data|attr|obj|exc|py:\w+):(?=<code)")


def _repo(config) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def on_files(files, config):
    repo = _repo(config)
    for page in api_pages.PAGES:
        files.append(File.generated(config, page.path, content=api_pages.markdown(page, repo)))
    return files


def on_page_markdown(markdown, page, config, files):
    if PARAMETER_TABLES in markdown:
        md = Path(config["docs_dir"]) / "parameters.md"
        markdown = markdown.replace(PARAMETER_TABLES, parameter_tables.page(md))
    return markdown


def on_page_content(html, page, config, files):
    return _ROLE.sub("", html)
