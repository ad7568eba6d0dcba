"""TOSA MLIR modules, text and bytecode: the records (``kind``), the reader (``read``) and
the behaviour of the main job (``format``)."""
