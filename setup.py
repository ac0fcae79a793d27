"""The C parts (cffi extension with the loader) are built here; metadata is in pyproject.toml."""

from setuptools import setup

setup(
    cffi_modules=["nx_hal/_ffi_build.py:ffi"],
    # The extension uses only the limited C API: one wheel for every CPython 3.10+.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
