"""The world's alphabet and its fixed table of letter successors.

Kept apart from :mod:`glance.toy.tasks` and :mod:`glance.toy.writer` so both
can read them without importing each other.
"""

import numpy as np

__all__ = ["ALPHABET", "LETTERS", "SUCCESSORS"]

#: every character a page, prompt or answer may use
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 .,:;!?'-=/"
LETTERS = "abcdefghijklmnopqrstuvwxyz"

#: The free letters' second-order table: after characters ``a, b`` the writer
#: may use the first ``k`` letters of ``SUCCESSORS[ALPHABET.index(a),
#: ALPHABET.index(b)]`` (:func:`glance.toy.writer.successor_rows`). A fixed
#: constant of the world (not of a task draw): the target learns it once.
SUCCESSORS = np.stack(
    [np.random.default_rng([12, i]).permutation(len(LETTERS)) for i in range(len(ALPHABET) ** 2)]
).reshape(len(ALPHABET), len(ALPHABET), len(LETTERS))
