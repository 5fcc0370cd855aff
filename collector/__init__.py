"""kvwatch collector: sources, parsers, state, the sidecar, sinks, forensics and the CLI."""

__version__ = "0.1.0"
