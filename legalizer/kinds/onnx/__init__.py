"""ONNX models: the record (``kind``), the protobuf helpers (``protoutil``), the reader
(``read``) and the behaviour of the main job (``format``)."""
