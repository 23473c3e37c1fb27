"""The real-model path end to end, on local checkpoints laid out as a hub
snapshot: a tiny Qwen3-VL and a tiny Qwen2.5-VL saved with sharded
safetensors and their index, a tokenizer, a chat template, the preprocessor
config (naming the fast image processor and the model's own processor class,
as hub copies do) and a DFlash head; then the stages exactly as the README's
GPU commands run them: prepare (a tiny DocVQA) -> target -> head -> decode ->
audit, with the default config's groups (``target=qwen3_vl_8b`` or
``qwen2_5_vl_7b`` pointed at the folder, ``head=checkpoint``)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
datasets = pytest.importorskip("datasets")

PATCH, MERGE, TEMPORAL = 16, 2, 2


def _tokenizer():
    from glance.toy.processor import build_tokenizer

    return build_tokenizer()  # character-level, with the Qwen-VL special tokens


def _model(kind: str, tok):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    ids = tok.convert_tokens_to_ids
    special = dict(
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
    )
    text = dict(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
        eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>"),
    )  # fmt: skip
    vision = dict(
        depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=PATCH,
        spatial_merge_size=MERGE, temporal_patch_size=TEMPORAL, out_hidden_size=64,
    )  # fmt: skip
    if kind == "qwen3_vl":
        rope = {"rope_type": "default", "rope_theta": 100.0, "mrope_section": [4, 2, 2]}
        text["rope_parameters"] = rope | {"mrope_interleaved": True}
        vision |= {"num_position_embeddings": 64, "deepstack_visual_indexes": []}
        config = tf.Qwen3VLConfig(text_config=text, vision_config=vision, **special)
        model = tf.Qwen3VLForConditionalGeneration(config)
    else:
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 100.0,
                                   "mrope_section": [4, 2, 2]}  # fmt: skip
        vision |= {"window_size": 32, "fullatt_block_indexes": [1]}
        config = tf.Qwen2_5_VLConfig(text_config=text, vision_config=vision, **special)
        model = tf.Qwen2_5_VLForConditionalGeneration(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 0.08)
    return model.eval()


def _snapshot(kind: str, folder: Path) -> Path:
    """The files a hub snapshot of a Qwen-VL model has."""
    from glance.toy.processor import CHAT_TEMPLATE

    tok = _tokenizer()
    model = _model(kind, tok)
    model.save_pretrained(folder, max_shard_size="150KB")  # shards + model.safetensors.index.json
    tok.save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    processor = "Qwen3VLProcessor" if kind == "qwen3_vl" else "Qwen2_5_VLProcessor"
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessorFast", "processor_class": processor,
        "patch_size": PATCH, "merge_size": MERGE, "temporal_patch_size": TEMPORAL,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "size": {"shortest_edge": 32 * 32, "longest_edge": 64 * 64},
    }))  # fmt: skip
    (folder / "processor_config.json").write_text(json.dumps({"processor_class": processor}))
    (folder / "generation_config.json").write_text(json.dumps({"do_sample": False}))
    return model


def _head(model, folder: Path, tok):
    from glance import testing as tiny

    head = tiny.build_head(model, block_size=8, mask=tok.convert_tokens_to_ids("<|mask|>"))
    head.save_pretrained(folder)


def _docvqa(path: Path, n: int) -> Path:
    from PIL import Image

    def png(i):
        buf = io.BytesIO()
        Image.new("RGB", (32 + 16 * (i % 2), 32), (40 * i % 255, 90, 160)).save(buf, "PNG")
        return {"bytes": buf.getvalue(), "path": None}

    F, V, L = datasets.Features, datasets.Value, datasets.List
    ds = datasets.Dataset.from_dict(
        {
            "questionId": [str(i) for i in range(n)],
            "question": [f"what is the total on page {i}?" for i in range(n)],
            "image": [png(i) for i in range(n)],
            "docId": list(range(n)),
            "answers": [[f"{i}"] for i in range(n)],
        },
        features=F(questionId=V("string"), question=V("string"), image=datasets.Image(),
                   docId=V("int64"), answers=L(V("string"))),
    )  # fmt: skip
    ds.to_parquet(str(path))
    return path


def _stage(name, *overrides, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HYDRA_FULL_ERROR="0", HF_HUB_OFFLINE="1",
               OMP_NUM_THREADS="1")  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", f"stages.{name}", *overrides],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, f"stages.{name}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "group"), [("qwen3_vl", "qwen3_vl_8b"),
                                             ("qwen2_5_vl", "qwen2_5_vl_7b")])  # fmt: skip
def test_a_hub_layout_checkpoint_runs_through_the_stages(tmp_path, kind, group):
    snapshot = tmp_path / "snapshot"
    model = _snapshot(kind, snapshot)
    assert (snapshot / "model.safetensors.index.json").is_file()
    assert len(list(snapshot.glob("model-*-of-*.safetensors"))) > 1
    _head(model, tmp_path / "head", _tokenizer())
    source = _docvqa(tmp_path / "validation.parquet", 4)
    work = tmp_path / "work"
    work.mkdir()
    common = [
        f"target={group}", f"target.path={snapshot}", "target.dtype=float32", "dtype=float32",
        "head=checkpoint", f"head.path={tmp_path / 'head'}", "tasks=[docvqa]", "n=2",
        "max_new_tokens=12", f"paths.data={work / 'data'}", f"paths.target={work / 'target'}",
        f"paths.head={work / 'head'}", f"paths.results={work / 'results'}", "threads=1",
        "decode.bootstrap=50", "decode.scored_row=false",  # no corpus here to train a scorer on
    ]  # fmt: skip
    _stage("prepare", *common, "prepare.dataset=docvqa", f"prepare.source={source}", cwd=work)
    records = [json.loads(x) for x in (work / "data" / "docvqa.jsonl").read_text().splitlines()]
    assert len(records) == 3 and records[0]["prompt"].endswith("single word or phrase.")
    _stage("target", *common, cwd=work)
    described = json.loads((work / "target" / "target.json").read_text())
    assert described["vision"] and described["layers"] == 4
    _stage("head", *common, cwd=work)
    _stage("decode", *common, "+task=docvqa", "decode.sampled=[0.7]", cwd=work)
    summary = json.loads((work / "results" / "decode" / "docvqa" / "summary.json").read_text())
    for row in ("glance", "chain", "glance_auto", "glance@0.7"):
        assert summary["systems"][row]["matches_baseline"] == 2, row
    _stage("audit", *common, "audit.n=2", "sweep.budgets=[1,15]", "decode.sampled=[0.7]",
           cwd=work)  # fmt: skip
    audit = json.loads((work / "results" / "audit.json").read_text())
    assert audit["mismatch"] == 0 and audit["equal"] == 2
    assert {"glance", "glance@N=1", "glance@N=15", "glance@0.7"} <= set(audit["rows"])


def _instructions(path: Path, n: int) -> Path:
    """An image-instruction set laid out as The Cauldron's: ``images`` a list,
    ``texts`` turns of ``{user, assistant, source}``; saved with ``save_to_disk``."""
    from PIL import Image

    def png(i):
        buf = io.BytesIO()
        Image.new("RGB", (32, 32 + 16 * (i % 2)), (90, 30 * i % 255, 60)).save(buf, "PNG")
        return {"bytes": buf.getvalue(), "path": None}

    F, V, L = datasets.Features, datasets.Value, datasets.List
    turn = {"user": V("string"), "assistant": V("string"), "source": V("string")}
    ds = datasets.Dataset.from_dict(
        {
            "images": [[png(i)] for i in range(n)],
            "texts": [[{"user": f"describe picture {i}", "assistant": "-", "source": "t"}]
                      for i in range(n)],
        },
        features=F(images=L(datasets.Image()), texts=L(turn)),
    )  # fmt: skip
    ds.save_to_disk(str(path))
    return path


TRAINED = [("qwen3_vl", "qwen3_vl_8b", "offline"), ("qwen2_5_vl", "qwen2_5_vl_7b", "online")]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "group", "features"), TRAINED)
def test_a_hub_layout_target_trains_its_own_head(tmp_path, kind, group, features):
    """``head=train`` for a real target: the corpus stage answers an
    image-instruction set with the target, the head stage trains on it, and
    the trained head decodes and audits losslessly."""
    snapshot = tmp_path / "snapshot"
    _snapshot(kind, snapshot)
    source = _docvqa(tmp_path / "validation.parquet", 4)
    instructions = _instructions(tmp_path / "instructions", 24)
    work = tmp_path / "work"
    work.mkdir()
    common = [
        f"target={group}", f"target.path={snapshot}", "target.dtype=float32", "dtype=float32",
        "tasks=[docvqa]", "n=2", "max_new_tokens=12", f"paths.data={work / 'data'}",
        f"paths.target={work / 'target'}", f"paths.head={work / 'head'}",
        f"paths.results={work / 'results'}", f"paths.corpus={work / 'corpus'}",
        f"paths.checkpoints={work / 'checkpoints'}", "threads=1", "decode.bootstrap=50",
        "corpus=cauldron_localized_narratives", f"corpus.source={instructions}",
        "corpus.greedy=12", "corpus.sampled=8", "corpus.heldout=4", "corpus.shard_size=32",
        "corpus.max_new_tokens=16", "head=train", "head.train.layers=1",
        "head.train.block_size=8", "head.train.steps=12", "head.train.eval_every=4",
        "head.train.save_every=5", f"head.train.features={features}",
        f"paths.scorer={work / 'scorer'}", "scorer.rank=8", "scorer.top_k=16", "scorer.steps=6",
        "scorer.rows=4", "scorer.blocks_per_row=2", "scorer.eval_every=2", "scorer.save_every=4",
    ]  # fmt: skip
    _stage("prepare", *common, "prepare.dataset=docvqa", f"prepare.source={source}", cwd=work)
    _stage("target", *common, cwd=work)
    _stage("corpus", *common, cwd=work)
    index = json.loads((work / "corpus" / "corpus.json").read_text())
    assert index["rows"] == {"train": 20, "heldout": 4}
    _stage("head", *common, cwd=work)
    record = json.loads((work / "head" / "head.json").read_text())
    assert record["source"] == "train" and record["block_size"] == 8
    assert record["train"]["features"] == features and len(record["train"]["heldout_curve"]) == 4
    assert not (work / "checkpoints" / "head").exists()  # finished: nothing left to resume
    assert (work / "results" / "train" / "head" / "metrics.json").is_file()
    _stage("scorer", *common, cwd=work)  # the consistency scorer, behind the trained head
    scorer = json.loads((work / "results" / "scorer.json").read_text())
    curve = scorer["train"]["heldout_curve"]
    assert [s for s, _ in curve] == [0, 2, 4, 6] and min(x for _, x in curve) > 0
    assert scorer["marginal_heldout_loss"] > 0
    assert not (work / "checkpoints" / "scorer").exists()
    _stage("decode", *common, "+task=docvqa", "decode.sampled=[0.7]", cwd=work)
    summary = json.loads((work / "results" / "decode" / "docvqa" / "summary.json").read_text())
    for row in ("glance", "chain", "glance_scored", "glance@0.7"):
        assert summary["systems"][row]["matches_baseline"] == 2, row
    _stage("audit", *common, "audit.n=2", "sweep.budgets=[1,15]", "decode.sampled=[0.7]",
           cwd=work)  # fmt: skip
    audit = json.loads((work / "results" / "audit.json").read_text())
    assert audit["mismatch"] == 0 and audit["equal"] == 2
    assert {"glance_scored", "glance_scored@N=32"} <= set(audit["rows"])
