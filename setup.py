"""Build of the compiled parts of headwater (plain C API): the reader's ingest fast path,
the Spark source's image JSON renderer, the row image decoder, the replay's key pass and
its survivors' decode into Arrow.

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
        ),
        Extension(
            "headwater._native._imagejson",
            sources=["src/headwater/_native/imagejson.c"],
            # rowjson.c is #included by imagejson.c (render_raw: the images from bytes)
            depends=["src/headwater/_native/rowjson.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
        Extension(
            "headwater._native._rowimage",
            sources=["src/headwater/_native/rowimage.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
        Extension(
            "headwater._native._lastwrite",
            sources=["src/headwater/_native/lastwrite.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
        Extension(
            "headwater._native._survivors",
            sources=["src/headwater/_native/survivors.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
        Extension(
            "headwater._native._busjoin",
            sources=["src/headwater/_native/busjoin.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
        Extension(
            # librdkafka is loaded at run time (dlopen): no header or library to build
            "headwater._native._rdproduce",
            sources=["src/headwater/_native/rdproduce.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
        Extension(
            "headwater._native._walk",
            sources=["src/headwater/_native/walk.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
    ]
)
