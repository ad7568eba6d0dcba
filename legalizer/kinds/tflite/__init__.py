"""TFLite models: the record (``kind``), the flatbuffer schema (``schema``), what the IR
keeps for the export (``records``), the reader (``read``) and the behaviour of the main
job (``format``)."""
