"""Task files and the benchmark datasets they come from."""
