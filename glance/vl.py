"""Vision-language targets, under the name users import them by. They live in
:mod:`glance.targets.vl`; importing this loads torch and transformers."""

from glance.targets.vl import *  # noqa: F403
from glance.targets.vl import __all__  # noqa: F401
