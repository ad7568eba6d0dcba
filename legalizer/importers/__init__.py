"""Importers: a model file of any kind into the IR (``reader``); each kind's own
importer is in its package (``kinds/<kind>/importer.py``)."""
