"""The one compiled part of privpipe; everything else is in pyproject.toml.

`mechanisms/curves/_forest.c` computes the dyadic forest's leaf sums in one pass
(plain C against the Python C API: buffers, no numpy headers). It is built by
`pip install` (the Makefile's set-up) with the machine's C compiler. -O3 lets
the compiler vectorise the per-piece loops; -ffp-contract=off forbids fused
multiply-adds and -fno-fast-math any reassociation, so each result is the same
double as the numpy formulation it replaced
(tests/mechanisms/curves/test_forest_kernel.py).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "mechanisms.curves._forest",
    sources=["mechanisms/curves/_forest.c"],
    extra_compile_args=["-O3", "-std=c11", "-ffp-contract=off", "-fno-fast-math"],
)])
