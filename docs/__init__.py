"""docs/ as the package ucutlass.docs, so that the language card (DSL.md) ships as package data: the agents' prompt
reads it through importlib.resources in editable and normal installs alike."""
