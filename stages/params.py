"""Write ``params.yaml``: the composition of ``conf/`` with any overrides, resolved.

    python -m stages.params                       # after editing conf/
    python -m stages.params budget=31      # what `dvc exp run -S` does

It composes exactly as DVC does with Hydra composition enabled (``.dvc/config``),
so the committed ``params.yaml`` and DVC's agree; a test checks that they do.
"""

from __future__ import annotations

import sys
from pathlib import Path

from glance.pipeline.app import CONF_DIR


def compose_params(overrides=()) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(CONF_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=list(overrides))
    OmegaConf.resolve(cfg)
    return OmegaConf.to_container(cfg)


def main(argv=None) -> None:
    from omegaconf import OmegaConf

    from glance._io import atomic_write_text

    overrides = sys.argv[1:] if argv is None else argv
    out = Path(CONF_DIR).parent / "params.yaml"
    atomic_write_text(out, OmegaConf.to_yaml(OmegaConf.create(compose_params(overrides))))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
