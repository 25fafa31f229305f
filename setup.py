"""Build of the compiled part of headwater: the reader's ingest fast path (plain C API).

Everything else is in pyproject.toml; setuptools merges the two. The extension needs
only the C compiler and the Python headers.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "headwater._native._ingest",
            sources=["src/headwater/_native/ingest.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ]
)
