"""Shared fixtures of the Python module's tests (run by CTest: tests/CMakeLists.txt).

OMNI_BINARY (the omni CLI) and OMNI_SOURCE_DIR (the repository) come from CTest; run by
hand, they default to <build>/bin/omni beside the imported package and to this checkout.
"""

import os
import pathlib

import pytest

import omni

SOURCE_DIR = pathlib.Path(os.environ.get("OMNI_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
MODEL = str(SOURCE_DIR / "models" / "tiny-shapes")
PROMPT = "a red circle moving right on a black background"
# Few steps keep the suite fast; everything compared runs the same steps.
STEPS = 3


@pytest.fixture(scope="session")
def omni_binary():
    default = pathlib.Path(omni.__file__).parents[2] / "bin" / "omni"
    path = pathlib.Path(os.environ.get("OMNI_BINARY", default))
    assert path.exists(), f"the omni CLI is not built at {path}"
    return path


@pytest.fixture(scope="module")
def engine():
    """One tiny-shapes engine with model-level offload (on the sim device here)."""
    with omni.Omni(MODEL, enable_cpu_offload=True) as e:
        yield e
