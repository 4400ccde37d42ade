"""The committed pre-training artifacts: hashes, contents, tamper detection, reproducibility.

The hashes are recomputed here with hashlib on the raw files, independently of the loader;
the loader must refuse a flipped byte, a truncated file, a missing file or a broken manifest
with an ArtifactError (a ValueError) that names the file. The slow test re-runs the first
pre-training steps and must land on the committed loss curve.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import struct

import pytest

from pclab.core.validation import InvalidInput
from pclab.experiments.transformer.lm import artifacts, data

ROOT = data.ROOT
FILES = {
    "artifacts/tokenizer.json",
    "artifacts/weights.safetensors",
    "artifacts/adamw_state.safetensors",
    "corpus/en.md",
    "corpus/zh.md",
}


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((ROOT / "artifacts" / "manifest.json").read_text(encoding="utf-8"))


def test_manifest_hashes_match_the_committed_files(manifest):
    assert set(manifest["files"]) == FILES
    for name, entry in manifest["files"].items():
        payload = (ROOT / name).read_bytes()
        assert hashlib.sha256(payload).hexdigest() == entry["sha256"], name
        assert len(payload) == entry["bytes"], name
    assert artifacts.verify_all() == {n: e["sha256"] for n, e in manifest["files"].items()}


def test_manifest_records_the_recipe(manifest):
    assert manifest["seed"] == 11 and manifest["steps"] == 800
    assert (
        manifest["model"]["num_parameters"] == 298_176 and manifest["model"]["dtype"] == "float64"
    )
    assert manifest["model"]["vocab_size"] == 387 and manifest["model"]["context"] == 96
    curve = manifest["loss_curve"]
    assert len(curve) == 800 and all(math.isfinite(x) for x in curve)
    assert curve[0] == pytest.approx(math.log(387), abs=0.05)  # a fresh model is near uniform
    assert sum(curve[-50:]) / 50 < curve[0] - 3.0  # and pre-training really learned the corpus


def test_no_pickle_anywhere():
    for name in ("weights.safetensors", "adamw_state.safetensors"):
        raw = (ROOT / "artifacts" / name).read_bytes()
        (header_len,) = struct.unpack("<Q", raw[:8])  # safetensors: u64 header length + JSON
        json.loads(raw[8 : 8 + header_len])
        assert not raw.startswith(b"\x80") and not raw.startswith(b"PK")  # pickle / torch zip
    package = ROOT / "experiments" / "transformer"
    for path in [*(package / "lm").glob("*.py"), package / "pretrain.py"]:
        source = path.read_text(encoding="utf-8")
        assert "torch.load(" not in source and "import pickle" not in source, path


def test_tokenizer_has_387_entries_and_round_trips():
    tokenizer = data.committed_tokenizer()
    assert tokenizer.get_vocab_size() == 387
    for path in data.corpus_paths():
        text = path.read_text(encoding="utf-8")
        assert tokenizer.decode(tokenizer.encode(text).ids) == text
    assert tokenizer.token_to_id(data.END_OF_TEXT) == 0


def test_weights_and_adamw_state_load():
    torch = pytest.importorskip("torch")
    from pclab.experiments.transformer.lm.model import TinyLM

    model = TinyLM()
    assert model.num_parameters() == 298_176
    artifacts.weights(model)
    assert all(p.dtype == torch.float64 for p in model.parameters())
    optimizer = artifacts.adamw(model)
    group = optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (
        3e-3,
        (0.9, 0.95),
        1e-8,
        0.1,
    )
    for p in model.parameters():
        state = optimizer.state[p]
        assert float(state["step"]) == 800.0
        assert state["exp_avg"].shape == p.shape and bool((state["exp_avg_sq"] >= 0).all())
        assert float(state["exp_avg_sq"].max()) > 0


def test_windows_and_the_label_shift():
    windows = data.experiment_windows()
    assert [w.capacity for w in windows[:3]] == [96, 96, 96]
    tail = windows[3]
    assert tail.index == "tail" and data.MIN_TAIL_TOKENS <= tail.capacity < 96
    targets = data.supervised_targets(tail, tail.capacity)
    assert all(t is None for t in targets[tail.capacity :])  # padding never carries a label
    assert list(targets[: tail.capacity]) == list(tail.chunk[1:])  # position i predicts token i + 1
    some = data.supervised_targets(windows[0], 40)
    assert [i for i, t in enumerate(some) if t is not None] == list(range(56, 96))  # the final 40
    plain, supervised = data.split_text(data.committed_tokenizer(), windows[0], 40)
    assert (
        supervised
        and (plain + supervised).strip() in artifacts.ROOT.joinpath("corpus/en.md").read_text()
    )


@pytest.mark.parametrize(
    "labels, field",
    [
        ((97, 0, 0, 0), "labels[0]"),
        ((0, 0, 0, 78), "labels[3]"),
        ((1, 2, 3), "labels"),
        ((0, -1, 0, 0), "labels[1]"),
    ],
)
def test_bad_labels_name_the_window(labels, field):
    capacity = data.capacities(data.experiment_windows())
    with pytest.raises(InvalidInput) as info:
        data.validate_labels(labels, capacity)
    assert info.value.field == field


# ---------------------------------------------------------------- tampering


@pytest.fixture
def copy_root(tmp_path):
    for name in [*FILES, artifacts.MANIFEST]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, tmp_path / name)
    return tmp_path


def _load_weights(root):
    pytest.importorskip("torch")
    from pclab.experiments.transformer.lm.model import TinyLM

    artifacts.weights(TinyLM(), root=root)


def test_the_copy_loads(copy_root):
    _load_weights(copy_root)  # the control: only the damage below makes loading fail


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_damaged_weights_are_refused(copy_root, damage):
    path = copy_root / artifacts.WEIGHTS
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0x01  # one bit of one float64
        path.write_bytes(bytes(raw))
    elif damage == "truncate":
        path.write_bytes(bytes(raw[: len(raw) - 8]))
    else:
        path.unlink()
    with pytest.raises(artifacts.ArtifactError, match="weights.safetensors"):
        _load_weights(copy_root)


def test_damaged_adamw_state_is_refused(copy_root):
    pytest.importorskip("torch")
    from pclab.experiments.transformer.lm.model import TinyLM

    path = copy_root / artifacts.ADAMW_STATE
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    with pytest.raises(artifacts.ArtifactError, match="adamw_state.safetensors"):
        artifacts.adamw(TinyLM(), root=copy_root)


def test_edited_corpus_is_refused(copy_root):
    path = copy_root / "corpus" / "en.md"
    path.write_text(path.read_text(encoding="utf-8") + " ", encoding="utf-8")
    with pytest.raises(artifacts.ArtifactError, match="corpus/en.md"):
        artifacts.verify_all(copy_root)


@pytest.mark.parametrize("content", [None, "{not json", "[]"])
def test_broken_manifest_is_refused(copy_root, content):
    path = copy_root / artifacts.MANIFEST
    if content is None:
        path.unlink()
    else:
        path.write_text(content)
    with pytest.raises(artifacts.ArtifactError, match="manifest"):
        _load_weights(copy_root)


# ---------------------------------------------------------------- reproducibility


@pytest.mark.slow
def test_pretraining_reproduces_the_start_of_the_curve(manifest):
    from pclab.experiments.transformer import pretrain

    result = pretrain.pretrain(steps=4)
    assert result.tokenizer_json == (ROOT / artifacts.TOKENIZER).read_text(encoding="utf-8")
    assert list(result.loss_curve) == pytest.approx(manifest["loss_curve"][:4], rel=0, abs=1e-10)
    assert result.loss_curve[3] < result.loss_curve[0]  # the optimizer moved the weights
