"""Backends: one interface, a CPU (numpy/numba) and a CUDA (CuPy) implementation."""
