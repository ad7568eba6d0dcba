"""Importers: translate a model file into the IR."""
