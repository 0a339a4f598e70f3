"""Package data: grammar (found through importlib.resources)."""
