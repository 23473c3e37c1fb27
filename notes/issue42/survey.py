"""Issue 42's nonsense cases, run as a user would; counts rc 0, tracebacks, lost files."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
T = Path(tempfile.mkdtemp(prefix="survey-"))
env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
res = f"paths.results={T / 'r'}"


def user_folder(name):
    f = T / name
    (f / "train" / "shard-00001").mkdir(parents=True)
    (f / "train" / "shard-00001" / "notes.txt").write_text("mine")
    (f / "thesis.tex").write_text("mine")
    return f


def snap(f):
    return {p: p.read_bytes() for p in Path(f).rglob("*") if p.is_file()}


results = T / "results"
shutil.copytree(ROOT / "results", results)
bad_law = T / "badlaw"
shutil.copytree(ROOT / "results", bad_law)
(bad_law / "law.json").write_text("{garbage")
neg_law = T / "neglaw"
shutil.copytree(ROOT / "results", neg_law)
law = json.loads((neg_law / "law.json").read_text())
law["pooled"]["b1"] = -7
law["pooled"]["holds"] = True
(neg_law / "law.json").write_text(json.dumps(law))
(T / "empty").mkdir()
mine = user_folder("mine")
data_copy = T / "data"
shutil.copytree(ROOT / "data" / "tasks", data_copy)
Image.new("RGB", (1024, 768), "white").save(T / "big.png")
(T / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"junk" * 10)

H, TOY, HEAD = f"paths.head={T / 'h'}", ROOT / "models/toy-target", ROOT / "models/head"
CLI = ["glance.cli", "decode", "--target", str(TOY), "--head", str(HEAD), "--prompt", "hi"]
# (name, module and arguments, a folder that must not change)
cases = [
    ("corpus over a user's folder", ["stages.corpus", f"paths.corpus={mine}", res], mine),
    ("decode out_dir=task data", ["stages.decode", "+task=docvqa", f"paths.data={data_copy}",
                                  f"out_dir={data_copy}", res], data_copy),
    ("scorer over the head", ["stages.scorer", f"paths.scorer={HEAD}", res], HEAD),
    ("head block_size=65", ["stages.head", "head.train.block_size=65", H,
                            f"paths.checkpoints={T / 'c'}", res], None),
    ("head lr=1e30", ["stages.head", "head.train.lr=1e30", H, f"paths.checkpoints={T / 'c'}",
                      res], None),
    ("corpus.context=100000", ["stages.corpus", "corpus.context=100000",
                               f"paths.corpus={T / 'c2'}", res], None),
    ("dtype=banana", ["stages.head", "dtype=banana", H, res], None),
    ("dtype=int64", ["stages.head", "dtype=int64", H, res], None),
    ("dtype=float8_e4m3fn", ["stages.head", "dtype=float8_e4m3fn", H, res], None),
    ("scorer.top_k=100000", ["stages.scorer", "scorer.top_k=100000",
                             f"paths.scorer={T / 's'}", res], None),
    ("head=checkpoint, no path", ["stages.head", "head=checkpoint", H, res], None),
    ("figures, garbage law.json", ["stages.figures", f"paths.results={bad_law}",
                                   f"paths.figures={T / 'f'}"], None),
    ("figures, b1=-7 holds", ["stages.figures", f"paths.results={neg_law}",
                              f"paths.figures={T / 'f'}"], None),
    ("sweep.budgets=[]", ["stages.sweep", "+task=docvqa", "sweep.budgets=[]", res], None),
    ("sweep.budgets=[15,15]", ["stages.sweep", "+task=docvqa", "sweep.budgets=[15,15]", res],
     None),
    ("numerics.mkl_cbwr=BOGUS", ["stages.head", "numerics.mkl_cbwr=BOGUS", H, res], None),
    ("report, empty results", ["stages.report", f"paths.results={T / 'empty'}",
                               f"paths.figures={T / 'empty'}"], None),
    ("prepare.n=1000000", ["stages.prepare", "prepare.n=1000000", f"paths.data={T / 'd2'}"],
     None),
    ("glance decode 1024x768", [*CLI, "--image", str(T / "big.png")], None),
    ("glance decode bad image", [*CLI, "--image", str(T / "bad.png")], None),
    ("dist_timeout=0", ["stages.head", "dist_timeout=0", H, res], None),
]  # fmt: skip
rows = []
for name, cmd, guard in cases:
    before = snap(guard) if guard else None
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", *cmd] + (["threads=1"] if "glance.cli" not in cmd else []),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    dt = time.perf_counter() - t
    lost = guard is not None and snap(guard) != before
    last = (p.stderr.strip().splitlines() or [""])[-1]
    rows.append((name, p.returncode, "Traceback" in p.stderr, lost, dt, last[:150]))
    print(
        f"{name:28s} rc={p.returncode} tb={'Traceback' in p.stderr} lost={lost} "
        f"{dt:5.1f}s  {last[:150]}",
        flush=True,
    )
print(
    "rc0:",
    sum(r[1] == 0 for r in rows),
    "tracebacks:",
    sum(r[2] for r in rows),
    "lost:",
    sum(r[3] for r in rows),
    "of",
    len(rows),
)
