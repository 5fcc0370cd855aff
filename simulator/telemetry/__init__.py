"""What the simulated engine emits: log lines, Prometheus metrics, server info, OTLP spans."""
