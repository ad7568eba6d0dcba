"""ONNX models: the record (``kind``), the protobuf helpers (``protoutil``), the importer
(``importer``, with its bounded shape inference, ``infer``, and onnxruntime's contrib
ops' shapes, ``contrib_shapes``) and the exporter (``exporter``), the reader (``read``)
and the behaviour of the main job (``format``)."""
