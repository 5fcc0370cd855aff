"""Detectors: the detection logic, one code path for live monitoring and forensics."""
