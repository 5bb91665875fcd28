"""rooflab: a reproducible Roofline experiment pipeline."""

__version__ = "0.1.0"
