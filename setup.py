"""The compiled parts of privpipe; everything else is in pyproject.toml.

Two kernels of the curve mechanisms, each one pass over the samples in plain C
against the Python C API (buffers, no numpy headers):
`mechanisms/curves/_forest.c` (the dyadic forest's leaf sums) and
`mechanisms/curves/_evaluate.c` (piecewise Legendre functions at given times);
`tasks/_keystream.c`, the ChaCha20 uniforms of a chunk of stream segments
(the same doubles as randomgen's ChaCha and numpy's Generator.random,
tests/tasks/test_keystream_kernel.py); and `tasks/_popsums.c`, the population
view's exact per-chunk sums of stream reports (tests/tasks/test_population_scan.py
checks them against DuckDB's SQL). Each checks its arguments with
`mechanisms/kernel_buffer.h`.
They are built by `pip install` (the Makefile's set-up) with the machine's C
compiler. -O3 lets the compiler vectorise the per-piece loops; -ffp-contract=off forbids fused
multiply-adds and -fno-fast-math any reassociation, so each result is the same
double as the numpy formulation beside it in the tests
(tests/mechanisms/curves/test_forest_kernel.py, test_evaluate_kernel.py).
"""

from setuptools import Extension, setup

_FLAGS = ["-O3", "-std=c11", "-ffp-contract=off", "-fno-fast-math"]


def _kernel(name: str) -> Extension:
    """Extension `name` from its .c file, with the shared buffer check on the include path."""
    return Extension(name, sources=[name.replace(".", "/") + ".c"], extra_compile_args=_FLAGS,
                     include_dirs=["mechanisms"], depends=["mechanisms/kernel_buffer.h"])


setup(ext_modules=[_kernel("mechanisms.curves._forest"), _kernel("mechanisms.curves._evaluate"),
                   _kernel("tasks._keystream"), _kernel("tasks._popsums")])
