"""TFLite models: the record (``kind``), the flatbuffer schema (``schema``), what the IR
keeps for the export (``records``), the importer (``importer``) and the exporter
(``exporter``), the model's translation to ONNX ops (``onnx_form``), the reader
(``read``) and the behaviour of the main job (``format``)."""
