"""ucutlass.search: the Optuna tuner (``ucutlass tune``)."""
