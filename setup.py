"""Build hook: ship the top-level ``dataset_card/``, ``loading_script/`` and ``recipes/`` inside the package.

The package metadata lives in pyproject.toml. The two folders stay at the top level of the
repository (the layout the project is specified with) and are their single source; a built wheel
carries a copy as ``orandcar_builder/_shipped/<folder>``, which ``orandcar_builder.shipped`` finds
first, so an installed package builds outside a checkout. When the repository is a git checkout,
the wheel also records the commit it was built from (``orandcar_builder/pipeline/_build_info.json``, read
by ``orandcar_builder/pipeline/provenance.py``), so a card built with the installed package names it.
"""

import json
import runpy
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("dataset_card", "loading_script", "recipes")


class BuildPyWithShipped(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the folders from the checkout itself
        root = Path(__file__).resolve().parent
        for name in SHIPPED:
            target = Path(self.build_lib) / "orandcar_builder" / "_shipped" / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(root / name, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        provenance = runpy.run_path(str(root / "orandcar_builder" / "pipeline" / "provenance.py"))
        info = Path(self.build_lib) / "orandcar_builder" / "pipeline" / provenance["BUILD_INFO"]
        source = provenance["git_source"](root)
        if source is not None:
            info.write_text(json.dumps(source) + "\n", encoding="utf-8")
        elif info.exists():
            info.unlink()


setup(cmdclass={"build_py": BuildPyWithShipped})
