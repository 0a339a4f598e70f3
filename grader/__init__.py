"""ucutlass.grader: checks and times candidates against a problem's reference."""
