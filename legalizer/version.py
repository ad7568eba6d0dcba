"""The package version, in one place (the report and the package read it)."""

__version__ = "0.1.0"
