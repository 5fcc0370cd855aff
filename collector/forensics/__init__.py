"""Forensics: the detection pipeline over historical telemetry, ending in a report."""
