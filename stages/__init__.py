"""The pipeline's stages: ``python -m stages.<name>``, each a thin Hydra app over ``conf/``."""
