"""A module that a registry test loads: it needs a package that is not installed."""

import a_dependency_not_installed  # noqa: F401

Widget = object
