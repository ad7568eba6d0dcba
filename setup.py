"""Package discovery for setuptools (the metadata is in pyproject.toml).

Every package under legalizer/ is found, so a new subpackage can never be left out of
the wheel; legalizer.rules is the top-level rules/ folder (package-dir in pyproject.toml),
which discovery under legalizer/ cannot see, so it is named here.
"""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["legalizer", "legalizer.*"]) + ["legalizer.rules"])
