"""Package data: problems (found through importlib.resources)."""
