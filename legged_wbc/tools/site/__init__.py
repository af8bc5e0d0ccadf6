"""The manual as a site (``mkdocs.yml`` at the repository root, ``docs/``): the pages generated at build
time from the code, and the build itself.

* :mod:`.parameter_tables` - the parameter tables from the one parameter schema (:func:`legged_wbc.params.schema`
  over the node config classes that ``docs/parameters.md`` lists);
* :mod:`.api_pages` - the API reference pages (mkdocstrings directives over every public module);
* :mod:`.hooks` - the MkDocs hooks that put both into the build;
* :mod:`.build` - ``legged-wbc docs``: build (strict) or serve the site.

It imports no other room.
"""
