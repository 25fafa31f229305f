"""Log data as a source (DESIGN.md, ``headwater.logs``; docs/logs.md).

Files of a directory, read as they grow and rotate (:mod:`~headwater.logs.files`, the
Spark data source :mod:`~headwater.logs.source`), structured by rule-operator groups
(:mod:`~headwater.logs.operators`, :mod:`~headwater.logs.groups`) into change rows with
UMS fields (:mod:`~headwater.logs.plan`), configured as a pipeline's ``source.logs``
section (:mod:`~headwater.logs.config`), previewed step by step
(:mod:`~headwater.logs.preview`). Imports only downward: changes, schema, errors.
"""
