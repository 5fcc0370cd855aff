"""Detectors: the detection logic, one code path for live monitoring and forensics.

`DetectionPipeline` (in `detectors.pipeline`) is the entry point; `REGISTRY` lists every
detector; `Finding` is what comes out.
"""

from detectors.finding import Finding, Severity

__all__ = ["Finding", "Severity"]
