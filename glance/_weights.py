"""Checks on a checkpoint's files before and after loading, each error naming
the file, the key or tensor, and what was expected.

``safetensors`` itself reports a cut or foreign file as a bare
``SafetensorError`` ("incomplete metadata", "header too large") without the
file's name, ``transformers`` turns an unknown ``dtype`` string into an
``AttributeError``, and an integer or non-finite tensor loads silently (cast
to the model's dtype) and only shows as a collapsed acceptance rate.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

__all__ = [
    "CONFIG_DTYPES",
    "FLOATING",
    "check_checkpoint",
    "check_config_dtype",
    "check_finite",
    "check_safetensors",
]

#: Bytes per element of each safetensors dtype (``safetensors``' own names).
_ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip

#: Tensor dtypes a head's weights may have: those a model computes in. An
#: integer tensor would be cast into a float parameter without a word, and
#: float8 needs scales that no GLANCE model reads.
FLOATING = ("F16", "BF16", "F32", "F64")

#: ``dtype`` / ``torch_dtype`` values a config may hold (float64 is what the
#: tests' tiny models are saved in).
CONFIG_DTYPES = ("float16", "bfloat16", "float32", "float64")

# safetensors refuses headers over 100 MB; a larger length means the first
# eight bytes are not a header length at all.
_MAX_HEADER = 100_000_000


def _files(folder_or_file, what: str) -> list[Path]:
    path = Path(folder_or_file)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{what} {path}: no such file or folder")
    files = sorted(path.glob("*.safetensors"))
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{what} {index}: not a safetensors index ({err!r})") from err
        gone = sorted(s for s in shards if not (path / str(s)).is_file())
        if gone:
            raise ValueError(f"{what} {index}: names shards that are not in the folder: {gone}")
    return files


def _header(file: Path, what: str) -> tuple[dict, int]:
    """The file's JSON header and the byte offset its data starts at."""
    size = file.stat().st_size
    where = f"{what} {file}"
    with file.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(
                f"{where}: not a safetensors file: has {size} bytes, fewer than the "
                "8 of a header length"
            )
        (n,) = struct.unpack("<Q", head)
        if n == 0 or n > _MAX_HEADER:
            raise ValueError(
                f"{where}: not a safetensors file: its first 8 bytes give a header "
                f"length of {n}, expected 1 to {_MAX_HEADER}"
            )
        if 8 + n > size:
            raise ValueError(
                f"{where}: truncated: has {size} bytes, its header alone needs {8 + n}"
            )
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{where}: not a safetensors file: header is not JSON ({err})") from err
    if not isinstance(header, dict):
        raise ValueError(
            f"{where}: not a safetensors file: header is a JSON {type(header).__name__}, "
            "expected an object"
        )
    return header, 8 + n


def _tensor_end(name: str, entry, where: str, floating: bool) -> int:
    """The end offset of tensor ``name``'s data, after checking its entry."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: tensor {name!r}: header entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if floating and dtype not in FLOATING:
        raise ValueError(
            f"{where}: tensor {name!r} has dtype {dtype}; expected a floating dtype "
            f"({', '.join(FLOATING)})"
        )
    ints = (list, tuple)
    if not (
        isinstance(shape, ints)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        and isinstance(offsets, ints)
        and len(offsets) == 2
        and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
    ):
        raise ValueError(
            f"{where}: tensor {name!r}: bad header entry shape {shape!r}, data_offsets {offsets!r}"
        )
    if dtype in _ITEMSIZE and offsets[1] - offsets[0] != math.prod(shape) * _ITEMSIZE[dtype]:
        raise ValueError(
            f"{where}: tensor {name!r}: data_offsets {list(offsets)} span "
            f"{offsets[1] - offsets[0]} bytes; shape {list(shape)} of {dtype} needs "
            f"{math.prod(shape) * _ITEMSIZE[dtype]}"
        )
    return offsets[1]


def check_safetensors(folder_or_file, what: str, floating: bool = True) -> list[Path]:
    """Check every ``*.safetensors`` file in ``folder_or_file`` (or that one
    file) from its header alone, without reading the weights: an 8-byte
    little-endian header length, a JSON header, each tensor's extent, and a
    size equal to ``8 + header length + the largest data end``. With
    ``floating``, every tensor must also be F16, BF16, F32 or F64. A
    sharded folder's ``model.safetensors.index.json`` must name only shards
    that exist. Raises ``ValueError`` starting ``"{what} {file}:"`` and
    saying what is wrong (truncated, not a safetensors file, a tensor's
    dtype or extent). Returns the files checked."""
    files = _files(folder_or_file, what)
    for file in files:
        where = f"{what} {file}"
        header, start = _header(file, what)
        end = 0
        for name, entry in header.items():
            if name != "__metadata__":
                end = max(end, _tensor_end(name, entry, where, floating))
        size, expected = file.stat().st_size, start + end
        if size < expected:
            raise ValueError(f"{where}: truncated: has {size} bytes, its header says {expected}")
        if size > expected:
            raise ValueError(
                f"{where}: has {size} bytes, its header says {expected}: "
                f"{size - expected} trailing bytes (a damaged or foreign file)"
            )
    return files


def check_config_dtype(data: dict, file, what: str, prefix: str = "") -> None:
    """Raise ``ValueError`` naming ``file``, the key and the value unless each
    of ``dtype`` and ``torch_dtype`` present in ``data`` (a parsed
    ``config.json``, or a part of one whose keys ``prefix`` names, as
    ``"transformer_layer_config."``) is null or one of :data:`CONFIG_DTYPES`.
    ``transformers`` would raise a bare ``AttributeError`` (``torch`` has no
    ``float8``), or ignore the value."""
    for key in ("dtype", "torch_dtype"):
        value = data.get(key)
        if value is not None and value not in CONFIG_DTYPES:
            raise ValueError(
                f"{what} {file}: {prefix}{key} {value!r}: expected a floating dtype, one "
                f"of {', '.join(CONFIG_DTYPES)}"
            )


def check_finite(named_tensors, folder, what: str) -> None:
    """Raise ``ValueError`` naming the tensor and its file (by the
    safetensors headers in ``folder``; the folder where no header has that
    name) if any of ``named_tensors`` (``(name, tensor)`` pairs, as
    ``model.state_dict().items()`` gives) holds NaN or infinity. Checked
    after loading, in the loaded dtype, so a value that overflows the cast
    (float32 weights over 65504 loaded as float16) is caught too."""
    import torch

    for name, tensor in named_tensors:
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            nan = int(torch.isnan(tensor).sum())
            inf = int(torch.isinf(tensor).sum())
            raise ValueError(
                f"{what} {_file_of(name, folder)}: tensor {name!r} holds {nan} NaN and "
                f"{inf} infinite values as loaded in {tensor.dtype}; expected finite weights"
            )


def _file_of(name: str, folder) -> Path:
    """The safetensors file in ``folder`` whose header holds ``name``, else ``folder``."""
    path = Path(folder)
    for file in sorted(path.glob("*.safetensors")) if path.is_dir() else [path]:
        try:
            if name in _header(file, "")[0]:
                return file
        except (OSError, ValueError):
            continue
    return path


def check_checkpoint(name_or_path, what: str, floating: bool = True) -> None:
    """Check a local checkpoint folder before ``from_pretrained`` reads it: its
    ``config.json`` is JSON with a floating ``dtype`` / ``torch_dtype``
    (:func:`check_config_dtype`) and its safetensors files are whole
    (:func:`check_safetensors`). A hub id passes (nothing is on disk yet); a
    missing local folder raises ``FileNotFoundError`` as
    ``glance._io.checkpoint_path`` does."""
    from glance._io import checkpoint_path

    path = checkpoint_path(name_or_path, what)
    if not isinstance(path, Path):
        return
    file = path / "config.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"{what} {file}: not JSON ({err})") from err
    if not isinstance(data, dict):
        raise ValueError(f"{what} {file}: a JSON {type(data).__name__}, expected an object")
    check_config_dtype(data, file, what)
    check_safetensors(path, what, floating=floating)
