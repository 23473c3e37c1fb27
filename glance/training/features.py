"""The frozen target's context features for training rows, without holding them all.

Two modes (``head.train.features``):

- ``online`` (:class:`OnlineFeatures`): the target runs on a row when a batch
  needs it. Nothing is stored; memory is bounded by the batch. The default for
  real targets, whose features would not fit anywhere (about 40 KB a token for
  Qwen3-VL-8B).
- ``offline`` (:class:`OfflineFeatures`): one pass writes every row's features
  to a flat file on disk, then batches read their rows back with ``pread``
  (no memory map, so resident memory stays the batch's). For targets whose
  forward costs much more than a head step, and for the toy.

Both give the same features for a row, bit for bit at float32.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from glance.training.loop import world

__all__ = [
    "FEATURE_MODES",
    "OfflineFeatures",
    "OnlineFeatures",
    "features_for",
    "sequence_features",
]

FEATURE_MODES = ("online", "offline")


@torch.no_grad()
def sequence_features(target, seq, layer_ids) -> torch.Tensor:
    """``(L, len(layer_ids) * hidden)``: one no-grad target pass over ``seq``
    (a :class:`~glance.training.block.Sequence`)."""
    from glance.heads.block import context_features

    ids = seq.input_ids[None].to(target.device)
    kwargs, _ = seq.positions.prefill(target, ids)
    out = target(input_ids=ids, output_hidden_states=True, use_cache=False, **kwargs)
    return context_features(out.hidden_states, layer_ids)[0]


class OnlineFeatures:
    """Row ``i``'s features computed by the target each time they are asked for."""

    def __init__(self, target, rows, layer_ids):
        self.target, self.rows, self.layer_ids = target, rows, list(layer_ids)

    def __call__(self, i: int) -> torch.Tensor:
        return sequence_features(self.target, self.rows.sequence(i), self.layer_ids).cpu()


class OfflineFeatures:
    """Every row's features, written once to ``folder`` and read back per row.

    ``folder/<key>/features.bin`` holds the rows' float32 features back to
    back; ``folder/<key>/index.json`` their offsets and shapes, and the key
    (over the corpus, the target and the layers read) whose digest names the
    subfolder, so runs over other corpora or layers keep their own files. A
    subfolder whose index is missing (a killed run) or differs is written
    again; ``features.bin`` is written aside and renamed into place.
    """

    def __init__(self, target, rows, layer_ids, folder, key: str, progress: bool = False):
        from tqdm import tqdm

        from glance._io import _umask, atomic_write_text

        self.layer_ids = list(layer_ids)
        key = hashlib.sha256(json.dumps([key, self.layer_ids]).encode()).hexdigest()
        # one folder per key: runs over other corpora or layers never overwrite these
        self.folder = Path(folder) / key[:16]
        index_file = self.folder / "index.json"
        rank, size = world()
        if rank == 0 and _read_index(index_file, key, len(rows)) is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            index_file.unlink(missing_ok=True)
            offsets, shapes, at = [], [], 0
            fd, tmp = tempfile.mkstemp(prefix=".features.bin.", dir=self.folder)
            os.fchmod(fd, 0o666 & ~_umask())
            try:
                with os.fdopen(fd, "wb") as f:
                    for i in tqdm(range(len(rows)), desc="context features", disable=not progress):
                        feats = sequence_features(target, rows.sequence(i), self.layer_ids)
                        data = feats.to("cpu", torch.float32).contiguous().numpy()
                        f.write(data.tobytes())
                        offsets.append(at)
                        shapes.append(list(data.shape))
                        at += data.nbytes
                os.replace(tmp, self.folder / "features.bin")  # a reader never sees half a file
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            index = {"key": key, "rows": len(rows), "offsets": offsets, "shapes": shapes}
            atomic_write_text(index_file, json.dumps(index) + "\n")
        if size > 1:  # the other ranks read what rank 0 wrote
            import torch.distributed as dist

            dist.barrier()
        index = _read_index(index_file, key, len(rows))
        if index is None:
            raise ValueError(f"{index_file}: missing or for another corpus after writing it")
        self.offsets = np.asarray(index["offsets"], dtype=np.int64)
        self.shapes = [tuple(s) for s in index["shapes"]]
        self._fd = os.open(self.folder / "features.bin", os.O_RDONLY)

    def __call__(self, i: int) -> torch.Tensor:
        shape = self.shapes[i]
        out = np.empty(shape, dtype=np.float32)
        view = memoryview(out).cast("B")
        got = os.preadv(self._fd, [view], int(self.offsets[i]))
        if got != out.nbytes:
            raise ValueError(f"{self.folder}/features.bin: row {i} is truncated")
        return torch.from_numpy(out)

    def __del__(self):
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)


def features_for(mode: str, target, rows, layer_ids, *, folder=None, key: str = "", progress=False):
    """The feature source ``mode`` names (:data:`FEATURE_MODES`)."""
    if mode == "online":
        return OnlineFeatures(target, rows, layer_ids)
    if mode == "offline":
        if folder is None:
            raise ValueError("features='offline' needs a folder to write them to")
        return OfflineFeatures(target, rows, layer_ids, folder, key, progress)
    raise ValueError(f"features must be one of {FEATURE_MODES}; got {mode!r}")


def _read_index(path: Path, key: str, rows: int) -> dict | None:
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return index if index.get("key") == key and index.get("rows") == rows else None
