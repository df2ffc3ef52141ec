"""The shell around the core: the CLI, its console tables, the embedded dev stack, the demos,
worker assembly and the Python client. Everything here may import the core, `activities/` and
`workflows/`; nothing there imports this."""
