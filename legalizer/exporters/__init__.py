"""Exporters: write the IR back out."""
