"""Dataset loaders, metrics and benchmarks."""
