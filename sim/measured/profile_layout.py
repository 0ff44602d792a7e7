"""Finding one model's profile files in Vidur's folder layout (with or without `compute/`).

    ROOT/compute/<gpu>/<org>/<model>/mlp.csv   ROOT/network/<gpu>_<topology>/all_reduce.csv
    ROOT/<gpu>/<org>/<model>/mlp.csv           ROOT/<gpu>/network/all_reduce.csv
ROOT may also be one <gpu> folder or one <org>/<model> folder. Models and GPUs are matched by the
project's names and aliases (`llama-2-7b` finds meta-llama/Llama-2-7b-hf, `A100-80GB` finds a100)
or by their folder names, case-insensitively.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sim.hardware.gpus import get_gpu
from sim.models.catalog import get_model
from sim.util.errors import ConfigError

ATTENTION_FILES = ("attention.csv", "attention_sample.csv")  # first present is read
PREFERRED_TOPOLOGY = "dgx"  # chosen among several <gpu>_<topology> folders when none is named


@dataclass(frozen=True)
class ProfileFiles:
    """The files of one (GPU, model) profile."""

    root: Path  # the directory searched
    gpu: str  # GPU folder name (e.g. "a100")
    model: str  # <org>/<model> folder names (e.g. "meta-llama/Llama-2-7b-hf")
    mlp: Path  # per-layer ops outside attention
    attention: Path | None  # attention ops, if profiled
    network: Path | None  # folder holding all_reduce.csv / send_recv.csv, if any

    def __post_init__(self) -> None:
        if not self.mlp.is_file():
            raise ConfigError("profiles.mlp", str(self.mlp), "no such file")


def _canonical_gpu(name: str) -> str:
    try:
        return get_gpu(name).name.lower()
    except ConfigError:
        return name.strip().lower()


def _canonical_model(name: str) -> str:
    try:
        return get_model(name).name.lower()
    except ConfigError:
        return name.strip().lower()


def _entries(root: Path) -> list[tuple[str, str, Path]]:
    """(gpu folder, org/model, model folder) of every mlp.csv found under `root`."""
    base = root / "compute" if (root / "compute").is_dir() else root
    found = [(m.parents[2].name, f"{m.parents[1].name}/{m.parent.name}", m.parent)
             for m in sorted(base.glob("*/*/*/mlp.csv"))]
    if not found:  # ROOT is one GPU folder
        found = [(root.name, f"{m.parents[1].name}/{m.parent.name}", m.parent)
                 for m in sorted(root.glob("*/*/mlp.csv"))]
    if not found and (root / "mlp.csv").is_file():  # ROOT is one model folder
        found = [(root.parents[1].name, f"{root.parent.name}/{root.name}", root)]
    return found


def list_profiles(root: Path) -> list[tuple[str, str]]:
    """(GPU folder, org/model folder) of every profile under `root` (any layout above)."""
    return [(gpu, model) for gpu, model, _ in _entries(Path(root))]


def _pick(entries: list[tuple[str, str, Path]], wanted: str | None, index: int, field: str,
          canonical: object, root: Path) -> list[tuple[str, str, Path]]:
    present = sorted({e[index] for e in entries})
    if wanted is None:
        if len(present) > 1:
            raise ConfigError(field, None, f"{root} holds several; name one of: "
                              f"{', '.join(present)}")
        return entries
    key = canonical(wanted)
    hits = [e for e in entries if canonical(e[index]) == key
            or e[index].lower() == wanted.strip().lower()]
    if not hits:
        raise ConfigError(field, wanted, f"not in the profiles under {root}; present: "
                          f"{', '.join(present) or 'none'}")
    return hits


def _network_dir(root: Path, model_dir: Path, gpu: str, topology: str | None) -> Path | None:
    candidates = [model_dir.parents[1] / "network", root / "network"]
    for folder in candidates:
        if (folder / "all_reduce.csv").is_file() or (folder / "send_recv.csv").is_file():
            return folder
    for folder in candidates:
        if not folder.is_dir():
            continue
        topos = sorted(d for d in folder.iterdir() if d.is_dir()
                       and d.name.lower().startswith(gpu.lower()))
        if topology is not None:
            topos = [d for d in topos if d.name.lower() in
                     (topology.lower(), f"{gpu}_{topology}".lower())]
            if not topos:
                raise ConfigError("topology", topology, f"no such folder under {folder}")
        if len(topos) > 1:
            topos = [d for d in topos if PREFERRED_TOPOLOGY in d.name.lower()] or topos[:1]
        if topos:
            return topos[0]
    return None


def locate_profiles(root: Path, model: str | None, gpu: str | None,
                    topology: str | None = None) -> ProfileFiles:
    """The profile files of `model` on `gpu` under `root`; ConfigError naming what is there."""
    entries = _entries(root)
    if not entries:
        raise ConfigError("profiles", str(root), "no <gpu>/<org>/<model>/mlp.csv found there")
    entries = _pick(entries, gpu, 0, "gpu", _canonical_gpu, root)
    entries = _pick(entries, model, 1, "model", _canonical_model, root)
    gpu_dir, model_name, model_dir = entries[0]
    attention = next((model_dir / f for f in ATTENTION_FILES if (model_dir / f).is_file()), None)
    return ProfileFiles(root, gpu_dir, model_name, model_dir / "mlp.csv", attention,
                        _network_dir(root, model_dir, gpu_dir, topology))
