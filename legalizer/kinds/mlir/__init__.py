"""TOSA MLIR modules, text and bytecode: the records (``kind``), the importer
(``importer``, with the MLIR types and attributes it reads, ``types``, the bounds it
reads under, ``bounds``, and the MLIR tools it runs, ``tool``), the reader (``read``)
and the behaviour of the main job (``format``)."""
