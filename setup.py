"""The C parts are built here; metadata is in pyproject.toml.

- ``nx_hal._nxhal_cffi`` (cffi): the bindings to the plugin table, with the
  loader from ``cabi/``.
- ``nx_hal._fastpath``: the per-call path of buffers and executables
  (nx_hal/_fastpath.c).
"""

from setuptools import Extension, setup

setup(
    cffi_modules=["nx_hal/_ffi_build.py:ffi"],
    ext_modules=[
        Extension(
            "nx_hal._fastpath",
            ["nx_hal/_fastpath.c"],
            include_dirs=["include"],
            extra_compile_args=["-std=c99", "-fvisibility=hidden"],
            define_macros=[("Py_LIMITED_API", "0x030A0000")],
            py_limited_api=True,
        )
    ],
    # Both extensions use only the limited C API: one wheel for every CPython 3.10+.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
