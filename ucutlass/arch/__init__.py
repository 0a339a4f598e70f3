"""Architecture rules: what each target accepts, checked before nvcc."""
