"""rooflab: a reproducible Roofline experiment pipeline."""

from rooflab.workloads import Workload

__version__ = "0.1.0"
__all__ = ["Workload"]
