"""Training draft heads on a target's features."""
