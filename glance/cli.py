"""The ``glance`` command: decode one prompt, or check that a head fits a target.

    glance decode --target models/toy-target --head models/head \\
        --image page.png --prompt "copy every field."
    glance check-head --target Qwen/Qwen3-VL-8B-Instruct --head /ckpt/dflash-qwen3-vl
    glance --help

``decode`` prints the answer, then one line of figures: tau, ms per token and
the speedup over the target's own greedy loop (:func:`glance.greedy_generate`),
both timed in the same call, in the decode window (prefill excluded), after
one short warm-up of each, and whether the output equals that baseline's
(lossless decoding always does; at temperature above 0 both draw from the
same seeded stream). ``--json`` prints one JSON object instead.

Arguments are checked before any model loads, and a bad one exits with
status 2 naming it, as the pipeline's stages do (``budget: expected ...;
got ...``). A checkpoint that fails to load, or a head that does not fit the
target, exits with status 1 and the loader's message, which names the file
and field. Any other file that cannot be read exits with status 2 and one
line naming it; a traceback means a bug (``GLANCE_DEBUG=1`` shows one for a
refusal too).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: the largest verify budget accepted (``glance.decoding.loop.MAX_BUDGET``)
MAX_BUDGET = 4095
DTYPES = ("auto", "float32", "bfloat16", "float16", "float64")


def _expected(parser, key: str, allowed: str, value) -> None:
    parser.error(f"{key}: expected {allowed}; got {value!r}")


def _integer(parser, key: str, text: str, low: int, high: int | None = None, allowed=None) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        if allowed is None:
            allowed = f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"
        _expected(parser, key, allowed, text if value is None else value)
    return value


def _number(parser, key: str, text: str, low: float, high: float = float("inf")) -> float:
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high or value == float("inf"):
        _expected(
            parser, key, f"a finite number in [{low}, {high}]", text if value is None else value
        )
    return value


def _budget(parser, text: str) -> int | str:
    if text == "auto":
        return "auto"
    return _integer(
        parser, "budget", text, 1, MAX_BUDGET, f'an integer in 1..{MAX_BUDGET} or "auto"'
    )


def _checkpoint(parser, key: str, text: str) -> str:
    """A local checkpoint folder must exist (a hub id, ``org/name``, is left
    to the loader, as :func:`glance._io.checkpoint_path` decides)."""
    local = text.startswith(("/", ".", "~")) or Path(text).exists()
    if local and not Path(text).expanduser().is_dir():
        _expected(parser, key, "a checkpoint folder or a hub id", text)
    return text


def _device(parser, text: str) -> None:
    import torch

    try:
        device = torch.device(text)
    except RuntimeError:
        device = None
    present = device is not None and (
        device.type == "cpu"
        or (
            device.type == "cuda"
            and torch.cuda.is_available()
            and (device.index or 0) < torch.cuda.device_count()
        )
    )
    if not present:
        _expected(parser, "device", "cpu or a CUDA device present on this machine", text)


def _settings(parser, args) -> dict:
    """The decode call's settings, each checked and named; nothing is loaded."""
    for key in ("target", "head"):
        _checkpoint(parser, key, getattr(args, key))
    if args.scorer is not None:
        _checkpoint(parser, "scorer", args.scorer)
    out = {
        "budget": _budget(parser, args.budget),
        "branch_k": _integer(parser, "branch_k", args.branch_k, 1),
        "max_new_tokens": _integer(parser, "max_new_tokens", args.max_new_tokens, 1),
        "temperature": _number(parser, "temperature", args.temperature, 0.0),
        "top_p": _number(parser, "top_p", args.top_p, 0.0, 1.0),
        "top_k": _integer(parser, "top_k", args.top_k, 0),
        "seed": _integer(parser, "seed", args.seed, 0, 2**32 - 1),
        "draft_window": None
        if args.draft_window is None
        else _integer(parser, "draft_window", args.draft_window, 1),
        "repeats": _integer(parser, "repeats", args.repeats, 1),
        "threads": _integer(parser, "threads", args.threads, 0, 256),
    }
    _device(parser, args.device)
    if args.scorer is not None and out["budget"] == "auto":
        _expected(parser, "budget", "an integer in 1..4095 with --scorer", args.budget)
    if out["top_p"] == 0.0:
        _expected(parser, "top_p", "a number in (0, 1]", args.top_p)
    if not args.prompt.strip():
        _expected(parser, "prompt", "a non-empty question", args.prompt)
    if args.image is not None:
        from glance.data.tasks import check_image

        path = Path(args.image)
        if not path.is_file():
            _expected(parser, "image", "an image file", args.image)
        try:
            # the header alone: bounded before the one decode, in _prompt_inputs
            check_image(path, f"image {path}", decode=False)
        except ValueError as err:
            parser.error(str(err))
    return out


def _load(args):
    """``(target, processor, head)``, loaded strictly; a loader's error exits 1."""
    import torch

    from glance import load_block_head
    from glance.targets.vl import load_target

    dtype = args.dtype if args.dtype == "auto" else getattr(torch, args.dtype)
    try:
        target, processor = load_target(args.target, dtype=dtype, device=args.device)
        if processor is None:
            raise ValueError(
                f"target {args.target}: no tokenizer or processor files to read a prompt"
            )
        head = load_block_head(args.head, target=target)
        scorer = None
        if getattr(args, "scorer", None) is not None:
            from glance.heads.scorer import load_scorer

            scorer = load_scorer(args.scorer, head, target)
    except (OSError, ValueError) as err:
        raise SystemExit(f"glance decode: {err}") from None
    return target, processor, head, scorer


def _check_prompt(parser, args, max_new_tokens: int):
    """The prompt's ids and positions from the target's processor and config
    alone, before any weight loads: a prompt (an image's tokens included) that
    leaves no room for ``max_new_tokens`` within the target's positions exits
    2, naming both lengths. Returns ``(ids, positions)``."""
    import transformers as tf

    from glance._io import checkpoint_path
    from glance.targets.vl import load_processor

    try:
        source = checkpoint_path(args.target, "target")
        config = tf.AutoConfig.from_pretrained(str(source))
        processor = load_processor(source, hasattr(config, "vision_config"))
    except (OSError, ValueError) as err:
        raise SystemExit(f"glance decode: {err}") from None
    if processor is None:
        raise SystemExit(f"glance decode: target {args.target}: no tokenizer or processor files")
    limit = config.get_text_config().max_position_embeddings

    def refuse(tokens: str) -> None:
        what = "prompt and image" if args.image is not None else "prompt"
        parser.error(
            f"prompt: the {what} make {tokens} tokens, and with max_new_tokens "
            f"{max_new_tokens} that is over the target's max_position_embeddings {limit}; "
            "give a smaller image, a shorter prompt or fewer new tokens"
        )

    if args.image is not None:  # from the image's header: a huge image is never decoded
        least = _least_prompt_tokens(processor, args)
        if least is not None and least + max_new_tokens > limit:
            refuse(f"at least {least}")
    ids, positions = _prompt_inputs(processor, args)
    if ids.shape[1] + max_new_tokens > limit:
        refuse(str(ids.shape[1]))
    return ids, positions


def _least_prompt_tokens(processor, args) -> int | None:
    """A lower bound on the prompt's tokens with its image, from the text alone
    and the image's size in its header (the image processor's own patch count,
    as vLLM reads it); ``None`` for a processor that cannot say."""
    from PIL import Image

    from glance.targets.vl import chat_inputs

    image_processor = getattr(processor, "image_processor", None)
    if not hasattr(image_processor, "get_number_of_image_patches"):
        return None
    with Image.open(args.image) as img:
        width, height = img.size
    if getattr(image_processor, "do_resize", True):
        patches = image_processor.get_number_of_image_patches(height, width, {})
    else:
        side = int(image_processor.patch_size)
        patches = (height // side) * (width // side)
    merge = int(getattr(image_processor, "merge_size", 1) or 1)
    try:
        text = chat_inputs(processor, args.prompt)[0].shape[1]
    except ValueError as err:
        raise SystemExit(f"glance decode: prompt: {err}") from None
    return text + patches // merge**2


def _prompt_inputs(processor, args):
    from glance.targets.vl import chat_inputs

    image = None
    if args.image is not None:
        from PIL import Image

        try:
            with Image.open(args.image) as img:
                image = img.convert("RGB")
        except (OSError, ValueError) as err:
            raise SystemExit(
                f"glance decode: image {args.image}: cannot be decoded ({err})"
            ) from None
    try:
        return chat_inputs(processor, args.prompt, image)
    except ValueError as err:
        raise SystemExit(f"glance decode: prompt: {err}") from None


def decode(args, parser) -> dict:
    """Run ``glance decode``: the answer and its figures, as a dict."""
    settings = _settings(parser, args)
    import torch

    import glance
    from glance.core.budget import VerifyCosts
    from glance.targets.vl import stop_ids

    if settings["threads"]:
        torch.set_num_threads(settings["threads"])
    ids, positions = _check_prompt(parser, args, settings["max_new_tokens"])
    target, processor, head, scorer = _load(args)
    ids = ids.to(target.device)
    stops = stop_ids(processor, target)
    sampled = settings["temperature"] > 0
    common = dict(
        positions=positions,
        stop_token_ids=stops,
        return_stats=True,
        temperature=settings["temperature"],
        top_p=settings["top_p"],
        top_k=settings["top_k"],
    )
    costs = VerifyCosts()  # auto's verify costs, measured once, in the warm-up

    def draw():
        gen = torch.Generator(device=target.device).manual_seed(settings["seed"])
        return dict(generator=gen) if sampled else {}

    def run_glance(n):
        return glance.generate(
            head,
            target,
            ids,
            n,
            budget=settings["budget"],
            branch_k=settings["branch_k"],
            costs=costs,
            draft_window=settings["draft_window"],
            scorer=scorer,
            **common,
            **draw(),
        )

    def run_greedy(n):
        return glance.greedy_generate(target, ids, n, **common, **draw())

    warm = min(8, settings["max_new_tokens"])
    run_greedy(warm)
    run_glance(warm)
    n = settings["max_new_tokens"]
    runs = {"glance": [], "greedy": []}
    for _ in range(settings["repeats"]):  # interleaved, so drift hits both alike
        runs["greedy"].append(run_greedy(n))
        runs["glance"].append(run_glance(n))
    out_ids, stats = runs["glance"][0]
    base_ids, _ = runs["greedy"][0]

    def pooled(rows):  # ms over tokens, pooled across repeats
        return sum(s.ms_per_token * s.new_tokens for _, s in rows) / sum(
            s.new_tokens for _, s in rows
        )

    glance_ms, greedy_ms = pooled(runs["glance"]), pooled(runs["greedy"])
    new = out_ids[0, ids.shape[1] :]
    tokenizer = getattr(processor, "tokenizer", processor)
    return {
        "answer": tokenizer.decode(new, skip_special_tokens=True),
        "new_tokens": int(new.numel()),
        "tau": stats.tau,
        "ms_per_token": glance_ms,
        "greedy_ms_per_token": greedy_ms,
        "speedup": greedy_ms / glance_ms,
        "equals_baseline": all(torch.equal(a, runs["greedy"][0][0]) for a, _ in runs["glance"])
        and all(torch.equal(b, base_ids) for b, _ in runs["greedy"]),
        "budget": settings["budget"],
        "mean_tree_size": sum(r.tree_size for r in stats.rounds) / max(1, len(stats.rounds)),
        "temperature": settings["temperature"],
        "repeats": settings["repeats"],
        "window": stats.timing,
        "ids": new.tolist(),
    }


def check_head(args, parser) -> dict:
    """Run ``glance check-head``: load the head strictly and check it against
    the target's config, on a weightless (meta-device) copy of the target, so
    an 8B target is checked without reading its weights."""
    for key in ("target", "head"):
        _checkpoint(parser, key, getattr(args, key))
    import torch
    import transformers as tf

    from glance import load_block_head
    from glance._io import checkpoint_path

    try:
        source = checkpoint_path(args.target, "target")
        if isinstance(source, Path):
            from glance._weights import check_checkpoint

            check_checkpoint(source, "target", floating=False)
        config = tf.AutoConfig.from_pretrained(str(source))
        if args.dtype == "auto":
            dtype = getattr(config.get_text_config(), "dtype", None) or config.dtype
            dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype or torch.bfloat16
        else:
            dtype = getattr(torch, args.dtype)
        vision = hasattr(config, "vision_config")
        cls = tf.AutoModelForImageTextToText if vision else tf.AutoModelForCausalLM
        with torch.device("meta"):
            target = cls.from_config(config, dtype=dtype)
        # loading against the target checks the fit (check_head_fits), naming the field
        head = load_block_head(args.head, target=target, device="cpu")
    except (OSError, ValueError) as err:
        return {"fits": False, "reason": str(err)}
    return {
        "fits": True,
        "block_size": int(head.block_size),
        "target_layer_ids": [int(i) for i in head.target_layer_ids],
        "mask_token_id": int(head.mask_token_id),
        "layers": int(head.config.num_hidden_layers),
        "parameters": sum(p.numel() for p in head.parameters()),
        "dtype": str(dtype).removeprefix("torch."),
    }


def parser() -> argparse.ArgumentParser:
    """The ``glance`` command's parser: ``decode`` and ``check-head``."""
    top = argparse.ArgumentParser(
        prog="glance", description="GLANCE: lossless block-draft speculative decoding for VLMs."
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    dec = sub.add_parser(
        "decode",
        help="decode one prompt (and image); print the answer, tau, ms/token and speedup",
        description="Decode one prompt with GLANCE and with the target's greedy loop, "
        "timed in the same call (decode window), and print the answer and the figures.",
    )
    chk = sub.add_parser(
        "check-head",
        help="say whether a block head fits a target, naming the field if not",
        description="Check a block head against a target's config without loading "
        "the target's weights.",
    )
    for p in (dec, chk):
        p.add_argument("--target", required=True, help="checkpoint folder or hub id")
        p.add_argument("--head", required=True, help="block head folder (any layout GLANCE loads)")
        p.add_argument("--dtype", default="auto", choices=DTYPES, help="default: the target's own")
        p.add_argument("--json", action="store_true", help="print one JSON object")
    dec.add_argument("--prompt", required=True, help="the question")
    dec.add_argument("--image", help="an image file (omit for a text-only prompt)")
    dec.add_argument("--budget", default="auto", help='tree nodes per round, or "auto"')
    dec.add_argument("--branch-k", dest="branch_k", default="8", help="candidates per offset")
    dec.add_argument("--temperature", default="0", help="0: greedy; above 0: exact sampling")
    dec.add_argument("--top-p", dest="top_p", default="1", help="nucleus, above temperature 0")
    dec.add_argument("--top-k", dest="top_k", default="0", help="0: off")
    dec.add_argument("--seed", default="0", help="the sampling stream's seed")
    dec.add_argument("--max-new-tokens", dest="max_new_tokens", default="256")
    dec.add_argument("--draft-window", dest="draft_window", help="context positions the head reads")
    dec.add_argument(
        "--scorer", help="a consistency scorer folder: it ranks the tree (fixed budget)"
    )
    dec.add_argument("--repeats", default="1", help="timed runs of each, interleaved and pooled")
    dec.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    dec.add_argument("--threads", default="0", help="torch threads (0: torch's default)")
    dec.set_defaults(run=decode, show=_print_decode, sub=dec)
    chk.set_defaults(run=check_head, show=_print_check, sub=chk)
    return top


def _print_decode(result: dict) -> None:
    print(result["answer"])
    print(
        f"tau {result['tau']:.2f} · {result['ms_per_token']:.2f} ms/token · "
        f"{result['speedup']:.2f}x over greedy ({result['greedy_ms_per_token']:.2f} ms/token) · "
        f"{result['new_tokens']} new tokens · budget {result['budget']} "
        f"(mean tree {result['mean_tree_size']:.1f}) · {result['window']} window"
    )
    same = "yes" if result["equals_baseline"] else "NO"
    print(f"output equals the target's own decoding: {same}")


def _print_check(result: dict) -> None:
    if not result["fits"]:
        print(f"does not fit: {result['reason']}")
        return
    print(
        f"fits: block {result['block_size']}, {result['layers']} layer(s), "
        f"reads target layers {result['target_layer_ids']}, mask token "
        f"{result['mask_token_id']}, {result['parameters']:,} parameters, {result['dtype']}"
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``glance`` console script; returns the exit status:
    0, 1 (a checkpoint failed to load, the head does not fit, or the output
    left its baseline) or 2 (a bad argument, or a file it cannot read: one
    line, :func:`glance._errors.reported`)."""
    from glance._errors import reported, stop_on_sigterm

    stop_on_sigterm()
    args = parser().parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        args.sub.error(
            'needs the decode extra (torch, transformers, dflash): pip install "glance[decode]"'
        )
    with reported():  # a refusal is one line and status 2, a bug its traceback
        result = args.run(args, args.sub)
    if args.json:
        print(json.dumps(result))
    else:
        args.show(result)
    return 0 if result.get("fits", result.get("equals_baseline")) else 1


if __name__ == "__main__":
    sys.exit(main())
