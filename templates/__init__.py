"""Package data: templates (found through importlib.resources)."""
