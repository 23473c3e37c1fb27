"""The candidate tree, under the name users import it by. It lives in
:mod:`glance.core.tree`; numpy only."""

from glance.core.tree import *  # noqa: F403
from glance.core.tree import __all__  # noqa: F401
