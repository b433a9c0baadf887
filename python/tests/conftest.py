"""Shared test setup: JAX must not take most of the GPU's memory when the GPU tests import it; a
counter of CuPy's allocations for the zero-copy tests."""

import contextlib
import os

import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


@pytest.fixture
def counting_cupy_allocations():
    """A context manager that counts every allocation from CuPy's allocator inside it (a temporary
    shows even when it is freed again) and yields the list of their sizes."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")

    @contextlib.contextmanager
    def counting():
        pool = cupy.get_default_memory_pool()
        cupy.cuda.Device().synchronize()
        sizes = []

        def counting_malloc(size):
            sizes.append(size)
            return pool.malloc(size)

        cupy.cuda.set_allocator(counting_malloc)
        try:
            yield sizes
            cupy.cuda.Device().synchronize()
        finally:
            cupy.cuda.set_allocator(pool.malloc)

    return counting
