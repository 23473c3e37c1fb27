"""File helpers: atomic writes that respect the umask, and paths that stay inside their folder."""

import os
import stat

import pytest

from glance._io import atomic_write_text, inside, replace_dir


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize(
    ("umask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)]
)
def test_writes_respect_the_umask(tmp_path, umask, file_mode, dir_mode):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "a.json", "{}\n")
        replace_dir(tmp_path / "ckpt", lambda d: (d / "w.txt").write_text("x"))
    finally:
        os.umask(old)
    assert mode(tmp_path / "a.json") == file_mode
    assert mode(tmp_path / "ckpt") == dir_mode
    assert (tmp_path / "a.json").read_text() == "{}\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


def test_inside_refuses_paths_that_leave_the_folder(tmp_path):
    base = tmp_path / "data"
    (base / "task").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("s")
    os.symlink(tmp_path / "secret.txt", base / "task" / "link.png")
    assert inside(base, "task/0001.png", "t.jsonl:1") == base / "task" / "0001.png"
    for bad in ("../secret.txt", "task/../../secret.txt", str(tmp_path / "secret.txt")):
        with pytest.raises(ValueError, match=r"t\.jsonl:3: .*secret\.txt"):
            inside(base, bad, "t.jsonl:3: image")
    with pytest.raises(ValueError, match="link.png.* leaves its folder"):
        inside(base, "task/link.png", "t.jsonl:4: image")
    for bad in ("", None, 7):
        with pytest.raises(ValueError, match="t.jsonl:5: expected a non-empty relative path"):
            inside(base, bad, "t.jsonl:5")
