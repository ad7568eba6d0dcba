"""TOSA MLIR modules, text and bytecode: the records (``kind``) and the behaviour of the
main job (``format``)."""
