"""The committed pre-training artifacts, loaded only after their SHA-256 matches the manifest.

    artifacts/manifest.json            seed, hyperparameters, loss curve, each file's SHA-256
    artifacts/tokenizer.json           byte-level BPE, 387 entries (Hugging Face `tokenizers`)
    artifacts/weights.safetensors      the model's parameters after step 800 (float64)
    artifacts/adamw_state.safetensors  AdamW's complete state after step 800:
                                       <param>.exp_avg, <param>.exp_avg_sq, <param>.step

Only JSON and safetensors are read: no pickle anywhere. Every file the experiment depends on
(the corpus too, because the windows are cut from it) is hashed in the manifest; a missing,
truncated or edited file raises `ArtifactError` (a ValueError) naming it, never a silently
different number.

    python -c "from pclab.experiments.transformer.lm import artifacts as a; print(a.verify_all())"
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pclab.core.validation import DamagedFile
from pclab.paths import PACKAGE_DIR

ROOT = PACKAGE_DIR
ARTIFACTS = ROOT / "artifacts"
MANIFEST = "artifacts/manifest.json"
TOKENIZER = "artifacts/tokenizer.json"
WEIGHTS = "artifacts/weights.safetensors"
ADAMW_STATE = "artifacts/adamw_state.safetensors"
MOMENTS = ("exp_avg", "exp_avg_sq")


class ArtifactError(DamagedFile):
    """A committed artifact is missing, malformed or does not match its manifest hash."""


def sha256(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def manifest(root: Path = ROOT) -> dict:
    """The parsed manifest (raises ArtifactError when missing or not a JSON object)."""
    path = root / MANIFEST
    try:
        parsed = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ArtifactError(
            MANIFEST,
            f"{MANIFEST} is missing: run `python -m pclab.experiments.transformer.pretrain`",
        ) from None
    except ValueError as exc:
        raise ArtifactError(MANIFEST, f"{MANIFEST} is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("files"), dict):
        raise ArtifactError(MANIFEST, f"{MANIFEST} has no 'files' table")
    return parsed


def verified_bytes(name: str, root: Path = ROOT) -> bytes:
    """The bytes of `name` (a repository path listed in the manifest), hash-checked."""
    entry = manifest(root)["files"].get(name)
    if not isinstance(entry, dict) or "sha256" not in entry:
        raise ArtifactError(name, f"{name} is not listed in {MANIFEST}")
    try:
        payload = (root / name).read_bytes()
    except FileNotFoundError:
        raise ArtifactError(name, f"{name} is missing") from None
    actual = sha256(payload)
    if actual != entry["sha256"]:
        raise ArtifactError(
            name,
            f"{name} does not match {MANIFEST}: sha256 {actual[:12]}… ({len(payload)} bytes), "
            f"expected {entry['sha256'][:12]}… ({entry.get('bytes', '?')} bytes)",
        )
    return payload


def verify_all(root: Path = ROOT) -> dict[str, str]:
    """Check every file in the manifest; returns name -> sha256 (raises on the first mismatch)."""
    return {name: sha256(verified_bytes(name, root)) for name in manifest(root)["files"]}


def _tensors(name: str, root: Path = ROOT) -> dict:
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        return load(verified_bytes(name, root))
    except SafetensorError as exc:
        raise ArtifactError(name, f"{name} is not a readable safetensors file: {exc}") from None


def weights(model, root: Path = ROOT) -> None:
    """Load the step-800 parameters into `model` (names, shapes and dtype must all match)."""
    tensors = _tensors(WEIGHTS, root)
    expected = dict(model.named_parameters())
    if set(tensors) != set(expected):
        raise ArtifactError(
            WEIGHTS, f"{WEIGHTS} holds {sorted(set(tensors) ^ set(expected))} unexpectedly"
        )
    for name, p in expected.items():
        if tensors[name].shape != p.shape or tensors[name].dtype != p.dtype:
            raise ArtifactError(
                WEIGHTS, f"{WEIGHTS}: {name} is {tuple(tensors[name].shape)} {tensors[name].dtype}"
            )
    model.load_state_dict(tensors, strict=True)


def adamw_hyperparameters(root: Path = ROOT) -> dict:
    """lr, betas, eps, weight_decay of the pre-training AdamW (constant after warm-up)."""
    opt = manifest(root)["optimizer"]
    return {
        "lr": opt["lr"],
        "betas": tuple(opt["betas"]),
        "eps": opt["eps"],
        "weight_decay": opt["weight_decay"],
    }


def adamw_state_tensors(root: Path = ROOT) -> dict:
    """The flat named tensors of adamw_state.safetensors (hash-checked)."""
    return _tensors(ADAMW_STATE, root)


def adamw(model, tensors: dict | None = None, root: Path = ROOT):
    """A `torch.optim.AdamW` over `model`'s parameters holding the exact step-800 state
    (step count and both moments of every parameter, pre-training's hyperparameters).

    `tensors` (from `adamw_state_tensors`) saves re-reading the file; they are cloned, so
    the optimizer never writes into the caller's copy.
    """
    import torch

    tensors = adamw_state_tensors(root) if tensors is None else tensors
    names = [name for name, _ in model.named_parameters()]
    expected = {f"{n}.{key}" for n in names for key in (*MOMENTS, "step")}
    if set(tensors) != expected:
        raise ArtifactError(
            ADAMW_STATE, f"{ADAMW_STATE} holds {sorted(set(tensors) ^ expected)[:4]} unexpectedly"
        )
    optimizer = torch.optim.AdamW(model.parameters(), foreach=False, **adamw_hyperparameters(root))
    state_dict = optimizer.state_dict()
    state_dict["state"] = {
        i: {key: tensors[f"{n}.{key}"].clone() for key in ("step", *MOMENTS)}
        for i, n in enumerate(names)
    }
    optimizer.load_state_dict(state_dict)
    return optimizer


def adamw_tensors(model, optimizer) -> dict:
    """AdamW's state as flat named tensors (the inverse of `adamw`), for saving."""
    names = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for p, state in optimizer.state.items():
        for key in ("step", *MOMENTS):
            out[f"{names[id(p)]}.{key}"] = state[key].detach().clone().contiguous()
    return out
