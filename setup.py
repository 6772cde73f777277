"""The one build step pyproject.toml cannot declare: ``pytest-gpu-harness.pth`` beside the packages.

Python runs it at the start of every interpreter of the environment; it does nothing unless the harness
set ``HARNESS_TEST_PROCESS`` (a test's spawned children and ``vllm serve``), as pytest-cov's own .pth did.
A wheel carries it through ``build_py``'s output; an editable install (``pip install -e .``), whose wheel
holds no package files, gets it in the install directory the editable wheel is made from.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "pytest-gpu-harness.pth"


class BuildWithPth(build_py):
    def run(self):
        super().run()
        source = str(Path(__file__).parent / PTH)
        self.copy_file(source, str(Path(self.build_lib, PTH)), preserve_mode=False)
        if self.editable_mode:  # editable_wheel packs its install directory, not build_lib
            target = self.get_finalized_command("install").install_lib
            self.copy_file(source, str(Path(target, PTH)), preserve_mode=False)

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib, PTH))]


setup(cmdclass={"build_py": BuildWithPth})
