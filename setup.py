"""Build of the compiled part of headwater: the reader's ingest fast path (plain C API).

Everything else is in pyproject.toml; setuptools merges the two. The extension links
zlib (the binlog's CRC32), which the Python headers' package already depends on.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "headwater._native._ingest",
            sources=["src/headwater/_native/ingest.c"],
            libraries=["z"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ]
)
