"""ONNX models: the record (``kind``), the protobuf helpers (``protoutil``) and the
behaviour of the main job (``format``)."""
