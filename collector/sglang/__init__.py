"""The SGLang adapter: every SGLang telemetry format turned into kvwatch events."""
