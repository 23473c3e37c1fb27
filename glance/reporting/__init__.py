"""Tables and figures from the pipeline's result files."""
