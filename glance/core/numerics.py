"""Pinned CPU numerics: the same bits on every x86-64 machine with AVX2.

PyTorch, MKL, oneDNN, OpenBLAS and NumPy each pick their vectorised code path
by the CPU they find, and each path rounds differently: a head trained on an
AVX-512 machine differs bit for bit from one trained on an AVX2 machine. Each
library also takes an environment variable that caps or fixes that choice,
read once, when the library first loads. :class:`Numerics` holds one value per
variable; :func:`pin` puts them in the environment of a pipeline process before
any of those libraries loads, and :func:`record` is what outputs carry to say
under which numerics they were made.

The defaults (see ``numerics`` in ``conf/config.yaml``) are measured choices:

- ``ATEN_CPU_CAPABILITY=avx2``: PyTorch's AVX2 kernels on every x86-64 CPU
  with AVX2, AVX-512 ones included. The ``default`` (baseline x86-64) kernels
  round the same way everywhere too, but run elementwise work unvectorised:
  training ran about twice as slow under them. Each level rounds its own way
  (fused multiply-adds, SLEEF's transcendentals), so a result holds only at the
  level it was made at, which this pin fixes.
- ``MKL_CBWR=AVX2``: MKL's conditional numerical reproducibility, the AVX2 code
  path on any Intel CPU that has it (matrix products; the bulk of the
  arithmetic). MKL honours it on Intel CPUs only: on an Intel AVX-512 machine
  the golden hash moves with it (``AVX2`` against ``AVX512`` or ``AUTO``), but
  on AMD it is ignored, so AMD and Intel machines train different bits under
  the same pin (``docs/guarantees.md``).
- ``ONEDNN_MAX_CPU_ISA=AVX2``: oneDNN (convolutions) capped at AVX2.
- ``OPENBLAS_CORETYPE=Haswell``: NumPy's and SciPy's OpenBLAS on its AVX2 kernels.
- ``NPY_DISABLE_CPU_FEATURES``: NumPy's own AVX-512 loops turned off.
- ``threads``: one fixed thread count for OpenMP, MKL and OpenBLAS (the
  split of a reduction across threads changes its rounding too).

This module imports nothing heavy: :func:`pin` must run before torch and numpy do.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass

# Each variable, and the module whose first import reads it: once that module
# is loaded, setting the variable changes nothing.
READERS = {
    "ATEN_CPU_CAPABILITY": "torch",
    "MKL_CBWR": "torch",
    "ONEDNN_MAX_CPU_ISA": "torch",
    "OMP_NUM_THREADS": "torch",
    "MKL_NUM_THREADS": "torch",
    "OPENBLAS_CORETYPE": "numpy",
    "OPENBLAS_NUM_THREADS": "numpy",
    "NPY_DISABLE_CPU_FEATURES": "numpy",
}

# ATen's capability names, lowest first.
ATEN_LEVELS = ("default", "avx2", "avx512")

# The values each library takes, as its documentation names them. A value a
# library does not know is ignored by it, silently: the output would record
# pinned numerics that never held. MKL's code paths, each optionally with
# ",STRICT":
MKL_BRANCHES = (
    "AUTO", "COMPATIBLE", "SSE2", "SSE3", "SSSE3", "SSE4_1", "SSE4_2", "AVX", "AVX2",
    "AVX512", "AVX512_MIC", "AVX512_E1", "AVX512_E2", "AVX512_E3", "AVX512_E4", "AVX512_E5",
    "AVX512_MIC_E1",
)  # fmt: skip
# oneDNN's ISA caps
ONEDNN_ISAS = (
    "SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI",
    "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16",
    "AVX10_1_512", "AVX10_1_512_AMX", "AVX10_1_512_AMX_FP16", "DEFAULT", "ALL",
)  # fmt: skip
# OpenBLAS's x86 core names (it compares them case-insensitively)
OPENBLAS_CORES = (
    "Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom", "Core2", "Penryn",
    "Dunnington", "Nehalem", "Athlon", "Opteron", "Opteron_SSE3", "Barcelona", "Nano",
    "Sandybridge", "Bobcat", "Bulldozer", "Piledriver", "Haswell", "Steamroller", "Excavator",
    "Zen", "SkylakeX", "Dhyana", "Cooperlake", "SapphireRapids",
)  # fmt: skip
# NumPy's CPU feature names (``numpy._core._multiarray_umath.__cpu_features__``;
# written out, since importing numpy here would fix its numerics before the pin)
NPY_FEATURES = (
    "MMX", "SSE", "SSE2", "SSE3", "SSSE3", "SSE41", "POPCNT", "SSE42", "AVX", "F16C", "XOP",
    "FMA4", "FMA3", "AVX2", "AVX512F", "AVX512CD", "AVX512ER", "AVX512PF", "AVX5124FMAPS",
    "AVX5124VNNIW", "AVX512VPOPCNTDQ", "AVX512VL", "AVX512BW", "AVX512DQ", "AVX512VNNI",
    "AVX512IFMA", "AVX512VBMI", "AVX512VBMI2", "AVX512BITALG", "AVX512FP16", "AVX512BF16",
    "AVX512_KNL", "AVX512_KNM", "AVX512_SKX", "AVX512_CLX", "AVX512_CNL", "AVX512_ICL",
    "AVX512_SPR", "X86_V2", "X86_V3", "X86_V4", "LAHF", "LZCNT", "MOVBE", "BMI", "BMI2", "CX16",
    "GFNI", "VAES", "VPCLMULQDQ", "VSX", "VSX2", "VSX3", "VSX4", "VX", "VXE", "VXE2", "NEON",
    "NEON_FP16", "NEON_VFPV4", "ASIMD", "FPHP", "ASIMDHP", "ASIMDDP", "ASIMDFHM", "SVE", "RVV",
    "LSX",
)  # fmt: skip


def _check_library_values(n: Numerics) -> None:
    """Raise ``ValueError`` naming the first of ``n``'s values its library does
    not take, and the values it does."""
    branch, _, strict = n.mkl_cbwr.partition(",")
    if branch not in MKL_BRANCHES or strict not in ("", "STRICT"):
        _refuse("mkl_cbwr", n.mkl_cbwr, f"one of {MKL_BRANCHES}, optionally with ',STRICT'")
    if n.onednn_max_cpu_isa not in ONEDNN_ISAS:
        _refuse("onednn_max_cpu_isa", n.onednn_max_cpu_isa, f"one of {ONEDNN_ISAS}")
    if n.openblas_coretype.lower() not in {c.lower() for c in OPENBLAS_CORES}:
        _refuse(
            "openblas_coretype", n.openblas_coretype, f"an OpenBLAS core, one of {OPENBLAS_CORES}"
        )
    if not isinstance(n.npy_disable_cpu_features, str):
        _refuse("npy_disable_cpu_features", n.npy_disable_cpu_features, "a string")
    for name in n.npy_disable_cpu_features.replace(",", " ").split():
        if name not in NPY_FEATURES:
            _refuse(
                "npy_disable_cpu_features",
                n.npy_disable_cpu_features,
                f"NumPy CPU feature names (such as AVX512F), separated by spaces; {name!r} is none",
            )


def _refuse(key: str, value, allowed: str):
    raise ValueError(f"numerics.{key}: expected {allowed}; got {value!r}")


@dataclass(frozen=True)
class Numerics:
    """One value per library's switch; ``pin=False`` leaves the machine's own."""

    pin: bool = True
    aten_cpu_capability: str = "avx2"
    mkl_cbwr: str = "AVX2"
    onednn_max_cpu_isa: str = "AVX2"
    openblas_coretype: str = "Haswell"
    npy_disable_cpu_features: str = "X86_V4 AVX512F AVX512_SKX AVX512_ICL AVX512_SPR"
    threads: int = 2

    def __post_init__(self):
        if self.aten_cpu_capability not in ATEN_LEVELS:
            raise ValueError(
                f"numerics.aten_cpu_capability: expected one of {ATEN_LEVELS}; "
                f"got {self.aten_cpu_capability!r}"
            )
        for field in ("mkl_cbwr", "onednn_max_cpu_isa", "openblas_coretype"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value or any(c.isspace() for c in value):
                raise ValueError(f"numerics.{field}: expected one word; got {value!r}")
        _check_library_values(self)
        low = 1 if self.pin else 0
        if (
            not isinstance(self.threads, int)
            or isinstance(self.threads, bool)
            or self.threads < low
        ):
            raise ValueError(
                f"threads: expected an integer >= {low}"
                + (" (a free thread count is not pinned numerics)" if self.pin else "")
                + f"; got {self.threads!r}"
            )

    @classmethod
    def from_config(cls, numerics, threads: int) -> Numerics:
        """From the config's ``numerics`` mapping and its top-level ``threads``."""
        known = {f.name for f in dataclasses.fields(cls)} - {"threads"}
        values = dict(numerics or {})
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"numerics: unknown key {unknown[0]!r}; known: {sorted(known)}")
        return cls(**values, threads=threads)

    def env(self) -> dict[str, str]:
        """The environment variables this pins, by name (empty when ``pin`` is off)."""
        if not self.pin:
            return {}
        n = str(self.threads)
        return {
            "ATEN_CPU_CAPABILITY": self.aten_cpu_capability,
            "MKL_CBWR": self.mkl_cbwr,
            "ONEDNN_MAX_CPU_ISA": self.onednn_max_cpu_isa,
            "OMP_NUM_THREADS": n,
            "MKL_NUM_THREADS": n,
            "OPENBLAS_CORETYPE": self.openblas_coretype,
            "OPENBLAS_NUM_THREADS": n,
            "NPY_DISABLE_CPU_FEATURES": self.npy_disable_cpu_features,
        }


class NumericsError(RuntimeError):
    """A library already loaded with other numerics than the ones asked for."""


def unpinned(numerics: Numerics, environ=None) -> dict[str, tuple[str | None, str]]:
    """Variables whose value in ``environ`` (default ``os.environ``) is not the
    pinned one: name -> (current, wanted)."""
    environ = os.environ if environ is None else environ
    return {k: (environ.get(k), v) for k, v in numerics.env().items() if environ.get(k) != v}


def pin(numerics: Numerics, *, reexec: bool = False) -> None:
    """Put ``numerics`` into this process's environment.

    Nothing to do when the environment already holds them. Otherwise, with
    ``reexec`` (a stage run as a program), the process replaces itself with
    the same command under the pinned environment, so every library reads it
    at its first load, whatever was imported before. Without ``reexec`` the
    variables are set in place, and :class:`NumericsError` is raised, naming
    the variable, when the library that reads one is already loaded with
    another value: its first load fixed that choice for the process.
    """
    wrong = unpinned(numerics)
    if not wrong:
        return
    if reexec:
        env = {**os.environ, **numerics.env()}
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    late = {k: v for k, v in wrong.items() if READERS[k] in sys.modules}
    if late:
        name, (have, want) = next(iter(late.items()))
        raise NumericsError(
            f"{name}: {READERS[name]} is already imported with {name}={have!r}, and "
            f"numerics pins {want!r}; set the numerics before {READERS[name]} is first "
            "imported (run the stage as a program, or export the variables), or set "
            "numerics.pin=false"
        )
    os.environ.update(numerics.env())


def record(numerics: Numerics) -> dict:
    """What an output records of the numerics it was made under: the pinned
    variables, the capability PyTorch actually runs at, and the versions of
    torch, MKL, oneDNN and NumPy. Machine facts that differ between machines
    under the same pin (the CPU's own capability) are left out, so that the
    record is the same wherever the pin holds."""
    import numpy as np

    out = {"pinned": numerics.pin, **numerics.env(), "threads": numerics.threads}
    out["numpy"] = np.__version__
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = torch.__version__
        out["aten_capability"] = torch.backends.cpu.get_cpu_capability().lower()
        for line in torch.__config__.show().splitlines():
            line = line.strip(" -")
            if line.startswith("Intel(R) oneAPI Math Kernel Library Version"):
                out["mkl"] = line.split("Version", 1)[1].split()[0]
            elif line.startswith("Intel(R) MKL-DNN"):
                out["onednn"] = line.split()[2]
    return out


def cpu() -> dict:
    """The machine's CPU as ``/proc/cpuinfo`` names it: ``vendor``, ``model``,
    and ``features``, its AVX2 and AVX-512 flags (empty where there is no
    ``/proc/cpuinfo``). A timing is read against it; a bit-for-bit result is
    not, which is why :func:`record` leaves it out."""
    out = {"vendor": "", "model": "", "features": []}
    try:
        text = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "vendor_id" and not out["vendor"]:
            out["vendor"] = value
        elif key == "model name" and not out["model"]:
            out["model"] = value
        elif key == "flags" and not out["features"]:
            out["features"] = sorted(f for f in value.split() if f.startswith(("avx2", "avx512")))
    return out


def describe_timing_machine(numerics: Numerics) -> str:
    """One line for a timing table: the CPU and the kernels the times ran on."""
    torch = sys.modules.get("torch")
    level = torch.backends.cpu.get_cpu_capability().lower() if torch is not None else "unknown"
    c = cpu()
    how = "pinned numerics" if numerics.pin else "the machine's own kernels (numerics unpinned)"
    return (
        f"Timed on {c['model'] or 'an unnamed CPU'} ({c['vendor'] or 'unknown vendor'}), "
        f"{numerics.threads} threads, with {how}: PyTorch's kernels at {level}."
    )
