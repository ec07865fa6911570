"""Packages for setuptools (everything else is in pyproject.toml).

One import namespace (issue 27): the top-level folders broker/, controller/ and chaos/ keep
their place in the repository but install and import as tidelog.broker, tidelog.controller and
tidelog.chaos (setuptools' package_dir mapping; editable installs and wheels alike), so a
wheel holds one top-level name and nothing collides with another distribution's ``broker``.
"""

from setuptools import find_packages, setup

#: Folders at the repository's root that are subpackages of tidelog once installed.
MAPPED = ("broker", "controller", "chaos")

packages = find_packages(include=["tidelog", "tidelog.*"])
for folder in MAPPED:
    packages += [f"tidelog.{name}" for name in find_packages(include=[folder, f"{folder}.*"])]

setup(packages=packages,
      package_dir={"tidelog": "tidelog", **{f"tidelog.{folder}": folder for folder in MAPPED}})
