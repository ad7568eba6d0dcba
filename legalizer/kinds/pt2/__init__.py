"""``torch.export`` programs (``.pt2``): the record (``kind``), the calls the IR keeps
(``records``), the importer (``importer``) and the exporter (``exporter``), a program
loaded safely (``safety``), exported to ONNX (``onnx_export``) and the fixes that would
make it legal (``suggested_fixes``), torch's logs quieted (``torch_logs``), the reader
(``read``) and the behaviour of the main job (``format``)."""
