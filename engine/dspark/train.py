"""Train a DSpark drafter by self-distillation.

1. Prompts: windows of real text available offline — CPython's standard library sources (the running
   interpreter's own Lib/) and prose (--prose-dir, e.g. the Python documentation sources from
   Debian's python3-doc) — minus the harness's evaluation texts. Never synthetic token ids.
2. The target continues each prompt greedily (batched); its residual stream at the drafter's capture
   layers is kept for every position: exactly what the engine hands the drafter at inference.
3. The drafter learns to predict the target's own continuation, block by block: for an anchor a (the
   last committed token), [tok_a, MASK x 6] must produce tok_{a+1..a+6}. Cross-entropy with a
   position decay; BCE for the confidence head (target: the greedy draft at that position is right).

python -m engine.dspark.train --out DIR [--time-budget SECONDS] [--prose-dir DIR] ...
Writes DIR/drafter.safetensors, DIR/drafter.json and DIR/training.json (the card's numbers).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import sysconfig
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.dspark.config import DrafterConfig
from engine.dspark.drafter import check_compatible, load_drafter_files, save_drafter_files
from engine.dspark.module import DrafterModule, rope_for
from engine.errors import EngineError
from engine.loader import load_model
from engine.model import Transformer

# Texts the harness evaluates on (harness/prompts) never enter training.
EXCLUDED_NAMES = {"argparse.py", "general.rst.txt", "design.rst.txt", "appetite.rst.txt", "floatingpoint.rst.txt"}
CHAT_TEMPLATES = {
    "code": "Explain what this code does, then show how to use it:\n\n{text}",
    "prose": "Summarize the following text and answer its main question:\n\n{text}",
}


def log(msg: str) -> None:
    print(f"[train {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- data -------------------------------------------------------------------------------------
def corpus_files(code_dir: Path | None, prose_dir: Path | None) -> dict[str, list[Path]]:
    code_root = code_dir or Path(sysconfig.get_paths()["stdlib"])
    code = sorted(p for p in code_root.rglob("*.py") if p.name not in EXCLUDED_NAMES and "test" not in p.parts
                  and "site-packages" not in p.parts and p.stat().st_size > 2000)
    prose: list[Path] = []
    if prose_dir:
        prose = sorted(p for p in prose_dir.rglob("*") if p.is_file() and p.suffix in (".txt", ".rst", ".md")
                       and p.name not in EXCLUDED_NAMES and p.stat().st_size > 2000)
    if not code:
        raise SystemExit(f"error: no Python sources found under {code_root}")
    return {"code": code, "prose": prose}


def extra_code_files(root: Path, limit: int, rng: random.Random) -> list[Path]:
    """Up to `limit` Python sources drawn from `root` (e.g. site-packages: more varied code than the standard
    library), 4-120 kB each; tests and anything of Django (the harness's code corpus) left out."""
    found = sorted(p for p in root.rglob("*.py") if p.name not in EXCLUDED_NAMES
                   and not any(part in ("test", "tests") or "django" in part.lower() for part in p.parts)
                   and 4000 <= p.stat().st_size <= 120_000)
    if not found:
        raise SystemExit(f"error: --extra-code-dir: no Python sources of 4-120 kB under {root}")
    return sorted(rng.sample(found, min(limit, len(found))))


def tokenized_docs(tokenizer, files: list[Path], min_tokens: int) -> list[list[int]]:
    docs = []
    for p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        ids = tokenizer.encode(text)
        if len(ids) >= min_tokens:
            docs.append(ids)
    return docs


def make_prompts(tokenizer, docs: dict[str, list[list[int]]], n: int, length: int, chat_fraction: float, rng: random.Random,
                 prose_share: float = 0.5) -> list[list[int]]:
    kinds = [k for k, v in docs.items() if v]
    prompts = []
    for i in range(n):
        if len(kinds) == 1:
            kind = kinds[0]
        else:
            kind = "prose" if (i + 0.5) / n < prose_share else "code"  # exact shares within the batch
        doc = rng.choice(docs[kind])
        if rng.random() < chat_fraction:
            start = rng.randrange(0, max(1, len(doc) - length))
            snippet = tokenizer.decode(doc[start : start + length // 2])
            text = tokenizer.apply_chat_template([{"role": "user", "content": CHAT_TEMPLATES[kind].format(text=snippet)}])
            ids = tokenizer.encode(text)
            if len(ids) >= length:
                ids = ids[-length:]
            else:  # left-fill with real text of the same kind so the batch shares one length
                filler = rng.choice(docs[kind])
                ids = filler[: length - len(ids)] + ids
                if len(ids) < length:
                    continue
            prompts.append(ids)
        else:
            start = rng.randrange(0, len(doc) - length + 1)
            prompts.append(doc[start : start + length])
    return prompts


@torch.inference_mode()
def generate_with_features(model: Transformer, prompts: list[list[int]], new_tokens: int, layers: tuple[int, ...], batch: int,
                           keep: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy continuations (batched) and the residuals at `layers` for every position.
    Returns tokens [N, L+G] int64 and features [N, L+G-1, n*D] bf16 (the last token is never a context).
    With `keep`, only the last `keep` prompt positions (plus the continuation) are returned: the drafter's
    anchors lie in the continuation and see at most `window` context positions before them, so a long
    prompt's head would only cost memory. RoPE is relative, so the shifted positions change nothing."""
    length = len(prompts[0])
    start = max(0, length - keep) if keep else 0
    batch = max(8, batch * 2048 // length) if length > 2048 else batch  # the KV cache of a long batch
    all_tokens, all_feats = [], []
    for b0 in range(0, len(prompts), batch):
        chunk = torch.tensor(prompts[b0 : b0 + batch], device=model.device)
        b = chunk.shape[0]
        cache = model.new_cache(length + new_tokens + 1, batch=b)
        logits, caps = model.forward_full(chunk, cache, 0, layers, logits="last")
        feats = [torch.cat(caps, -1).to(torch.bfloat16)]
        toks = [chunk]
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        for step in range(new_tokens - 1):
            toks.append(nxt)
            logits, caps = model.forward_full(nxt, cache, length + step, layers, logits="last")
            feats.append(torch.cat(caps, -1).to(torch.bfloat16))
            nxt = logits[:, -1].argmax(-1, keepdim=True)
        toks.append(nxt)
        all_tokens.append(torch.cat(toks, 1)[:, start:])
        all_feats.append(torch.cat(feats, 1)[:, start:])
        del cache
    return torch.cat(all_tokens), torch.cat(all_feats)


# -- training ---------------------------------------------------------------------------------
def position_weights(p: int, decay: float, device) -> torch.Tensor:
    w = torch.exp(-torch.arange(p, device=device, dtype=torch.float32) / decay)
    return w / w.sum() * p


def sample_anchors(b: int, lo: int, hi: int, a: int, device, gen: torch.Generator) -> torch.Tensor:
    """a distinct anchors per row in [lo, hi] (inclusive)."""
    span = hi - lo + 1
    a = min(a, span)
    scores = torch.rand(b, span, generator=gen, device="cpu")
    return (scores.topk(a, dim=1).indices + lo).sort(dim=1).values.to(device)


def batch_loss(module: DrafterModule, tokens, feats, anchors, cos, sin, pw, conf_weight: float):
    logits, base, h = module(feats, tokens, anchors, cos, sin)
    p = logits.shape[2]
    idx = anchors[:, :, None] + torch.arange(1, p + 1, device=tokens.device)
    labels = torch.gather(tokens, 1, idx.reshape(tokens.shape[0], -1)).reshape(idx.shape)
    ce = F.cross_entropy(logits.float().flatten(0, 2), labels.flatten(), reduction="none").reshape(labels.shape)
    loss = (ce * pw).mean()
    with torch.no_grad():
        correct = (logits.argmax(-1) == labels).float()
    conf = module.confidence_logit(h.detach(), base.detach())
    bce = F.binary_cross_entropy_with_logits(conf, correct)
    # teacher-forced acceptance: leading run of correct positions = drafts a greedy verify keeps
    run = torch.cumprod(correct, dim=-1).sum(-1)
    return loss + conf_weight * bce, {"ce": float(ce.detach().mean()), "bce": float(bce.detach()), "acc1": float(correct[..., 0].mean()), "accept": float(run.mean())}


def teacher_forced_tau(ev: list[dict] | None) -> float | None:
    """1 + mean teacher-forced acceptance over held-out sets (None when there are none)."""
    return 1 + sum(e["accept"] for e in ev) / len(ev) if ev else None


def train(args) -> dict:
    t_begin = time.perf_counter()
    try:
        init = load_drafter_files(args.init) if args.init else None
    except EngineError as exc:
        raise SystemExit(f"error: --init: {exc}") from None
    if args.extra_code_dir and not Path(args.extra_code_dir).is_dir():
        raise SystemExit(f"error: --extra-code-dir: {args.extra_code_dir} is not a directory")
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    loaded = load_model(args.model)
    tc = loaded.config
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    target = Transformer(tc, loaded.weights, dev, dtype)
    layers = tuple(int(x) for x in args.target_layers.split(",")) if args.target_layers else (1, tc.n_layers // 2, tc.n_layers - 2)
    cfg = DrafterConfig(target_layers=layers, dim=tc.dim, n_layers=args.layers, n_heads=tc.n_heads, n_kv_heads=tc.n_kv_heads,
                        head_dim=tc.head_dim, ffn_dim=args.ffn, window=args.window, markov_rank=args.markov_rank,
                        norm_eps=tc.norm_eps, rope_theta=tc.rope_theta, vocab_size=tc.vocab_size, target_sha256=loaded.sha256)
    if init is not None:  # continue a drafter: its configuration and weights, checked against this target
        if init.config.target_sha256 and init.config.target_sha256 != loaded.sha256:
            raise SystemExit(f"error: the drafter in {args.init} was trained for another target model")
        try:
            check_compatible(init.config, target)
        except EngineError as exc:
            raise SystemExit(f"error: --init: {exc}") from None
        cfg = init.config
        layers = cfg.target_layers

    # data: documents split into train / held-out (evaluation never sees a training document)
    files = corpus_files(Path(args.code_dir) if args.code_dir else None, Path(args.prose_dir) if args.prose_dir else None)
    lengths = [int(x) for x in args.prompt_lens.split(",")]
    docs = {k: tokenized_docs(loaded.tokenizer, v, min(lengths) + 1) for k, v in files.items()}
    train_docs, eval_docs = {}, {}
    for kind, ds in docs.items():
        rng.shuffle(ds)
        cut = max(1, int(len(ds) * args.eval_fraction)) if len(ds) > 1 else 0
        eval_docs[kind], train_docs[kind] = ds[:cut], ds[cut:]
    if args.extra_code_dir:  # more code: split on its own stream, so the split above stays the same
        extra_rng = random.Random(args.seed + 7)
        extra = tokenized_docs(loaded.tokenizer, extra_code_files(Path(args.extra_code_dir), args.extra_code_files, extra_rng), min(lengths) + 1)
        extra_rng.shuffle(extra)
        cut = max(1, int(len(extra) * args.eval_fraction))
        eval_docs["code-extra"], train_docs["code"] = extra[:cut], train_docs["code"] + extra[cut:]
        docs["code-extra"] = extra
    log(f"corpus: {len(docs['code'])} code docs, {len(docs.get('code-extra', []))} more code docs, {len(docs['prose'])} prose docs "
        f"({sum(map(len, eval_docs.values()))} held out); target layers {layers}")
    if args.data_seed is not None:  # other prompts than --seed's, from the same training documents
        rng = random.Random(args.data_seed)

    def docs_for(pool: dict, length: int) -> dict:
        return {k: [d for d in v if len(d) > length] for k, v in pool.items()}

    keep = cfg.window + 1  # prompt positions an anchor can see (see generate_with_features)
    buckets: dict[int, list] = {L: [] for L in lengths}
    data_deadline = args.total_budget * args.data_fraction
    n_batches = 0
    while True:
        L = lengths[n_batches % len(lengths)]
        elapsed = time.perf_counter() - t_begin
        done = sum(t.shape[0] for parts in buckets.values() for t, _ in parts)
        if n_batches >= len(lengths) and (elapsed > data_deadline or done >= args.data_seqs):
            break
        pool = docs_for(train_docs, L)
        if not any(pool.values()):
            raise SystemExit(f"error: no training document is longer than {L} tokens")
        prompts = make_prompts(loaded.tokenizer, pool, args.gen_batch, L, args.chat_fraction, rng, args.prose_share)
        t0 = time.perf_counter()
        buckets[L].append(generate_with_features(target, prompts, args.gen_tokens, layers, args.gen_batch, keep))
        n_batches += 1
        log(f"generated {len(prompts)} x ({L} + {args.gen_tokens}) tokens in {time.perf_counter() - t0:.1f}s")
    # (prompt length as kept, tokens, features): anchors start at the last prompt position
    train_sets = [(min(L, keep), torch.cat([t for t, _ in parts]), torch.cat([f for _, f in parts])) for L, parts in buckets.items() if parts]
    n_seqs = sum(t.shape[0] for _, t, _ in train_sets)
    eval_sets = []  # per prompt length and kind of text, so the card says how prose and code differ
    for L in lengths:
        for kind, kind_docs in docs_for(eval_docs, L).items():
            if kind_docs:
                prompts = make_prompts(loaded.tokenizer, {kind: kind_docs}, args.eval_seqs // 2, L, 0.0, rng)
                eval_sets.append((L, kind, min(L, keep), *generate_with_features(target, prompts, args.gen_tokens, layers, args.gen_batch, keep)))
    data_s = time.perf_counter() - t_begin
    log(f"data: {n_seqs} training sequences in {data_s:.0f}s")

    def evaluate(module: DrafterModule) -> list[dict]:
        """Teacher-forced acceptance (~ tau - 1 at full depth) per held-out set, at the same anchors every
        time it is called; leaves the module in train mode."""
        eval_gen = torch.Generator().manual_seed(eval_seed)
        module.eval()
        ev = []
        with torch.no_grad(), autocast:
            for L, kind, L_kept, toks, feats in eval_sets:
                parts = []
                for i in range(0, toks.shape[0], 8):  # small chunks: the logits of a chunk are [8, A, 6, V]
                    t_c, f_c = toks[i : i + 8], feats[i : i + 8]
                    anchors = sample_anchors(t_c.shape[0], L_kept - 1, t_c.shape[1] - cfg.block_size, args.anchors, dev, eval_gen)
                    parts.append(batch_loss(module, t_c, f_c, anchors, cos, sin, pw, args.conf_weight)[1])
                m = {k: sum(p[k] for p in parts) / len(parts) for k in parts[0]}
                m["prompt_len"], m["kind"] = L, kind
                ev.append(m)
        module.train()
        return ev

    if init is not None:
        module = DrafterModule.from_weights(cfg, init.weights, target.embed.detach(), target.lm_head.detach()).to(dev)
    else:
        module = DrafterModule(cfg, target.embed.detach(), target.lm_head.detach()).to(dev)
    params = [p for p in module.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay)
    max_len = max(t.shape[1] for _, t, _ in train_sets) + cfg.block_size + 1
    cos, sin = rope_for(cfg, max_len, dev)
    pw = position_weights(cfg.proposals, args.decay, dev)
    eval_seed = args.seed + 1_000_003  # the evaluations' anchors: their own stream, the same each time
    autocast = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda")
    ev_before = evaluate(module) if init is not None else None  # the drafter it continues, on the same held-out sets
    train_budget = args.total_budget - (time.perf_counter() - t_begin) - args.reserve
    log(f"drafter: {n_params / 1e6:.2f}M parameters; training for {train_budget:.0f}s")
    t_train = time.perf_counter()
    step, history = 0, []
    est_steps = None
    while True:
        elapsed = time.perf_counter() - t_train
        if elapsed >= train_budget or (args.max_steps and step >= args.max_steps):
            break
        if step == 50:
            est_steps = max(100, int(train_budget / (elapsed / 50)))
        total = est_steps or 10**9
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / total))))
        for group in opt.param_groups:
            group["lr"] = lr
        L, toks, feats = train_sets[step % len(train_sets)]
        rows = torch.randint(0, toks.shape[0], (args.batch,), generator=gen).to(toks.device)
        t_b, f_b = toks[rows], feats[rows]
        anchors = sample_anchors(args.batch, L - 1, toks.shape[1] - cfg.block_size, args.anchors, dev, gen)
        with autocast:
            loss, m = batch_loss(module, t_b, f_b, anchors, cos, sin, pw, args.conf_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % args.log_every == 0:
            m.update(step=step, lr=lr, loss=float(loss.detach()), t=round(time.perf_counter() - t_train, 1))
            history.append(m)
            log(json.dumps(m))
        step += 1
    train_s = time.perf_counter() - t_train

    out = Path(args.out)
    save_drafter_files(out, cfg, module.export())  # before evaluation: nothing after this can lose the weights
    ev = evaluate(module)
    size = (out / "drafter.safetensors").stat().st_size
    card = {
        "target": loaded.source_path.name, "target_sha256": loaded.sha256, "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "config": cfg.to_dict(), "parameters": n_params, "file_bytes": size,
        "data": {"code_docs": len(docs["code"]), "extra_code_docs": len(docs.get("code-extra", [])), "extra_code_dir": args.extra_code_dir,
                 "prose_docs": len(docs["prose"]), "held_out_docs": {k: len(v) for k, v in eval_docs.items()},
                 "prompt_lens": lengths, "sequences": n_seqs,
                 "gen_tokens": args.gen_tokens, "chat_fraction": args.chat_fraction, "prose_share": args.prose_share, "excluded": sorted(EXCLUDED_NAMES)},
        "training": {"steps": step, "batch": args.batch, "anchors": args.anchors, "lr": args.lr, "decay": args.decay,
                     "data_seconds": round(data_s, 1), "train_seconds": round(train_s, 1), "total_seconds": round(time.perf_counter() - t_begin, 1)},
        "history": history, "eval": ev,
        "eval_tau_teacher_forced": teacher_forced_tau(ev),
        "eval_tau_teacher_forced_by_kind": {k: teacher_forced_tau([e for e in ev if e["kind"] == k]) for k in sorted({e["kind"] for e in ev})},
        "command": " ".join(sys.argv),
    }
    if init is not None:  # what it continued: that drafter's digest, its held-out figures here, its own card
        prev = init.path / "training.json"
        card["init"] = {"path": str(args.init), "sha256": init.sha256, "eval": ev_before,
                        "eval_tau_teacher_forced": teacher_forced_tau(ev_before),
                        "card": json.loads(prev.read_text()) if prev.is_file() else None}
    (out / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    before = f" (the drafter it continued: {card['init']['eval_tau_teacher_forced']})" if init is not None else ""
    log(f"done: {step} steps, held-out teacher-forced tau {card['eval_tau_teacher_forced']}{before}, {size / 1e6:.2f} MB -> {out}")
    return card


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m engine.dspark.train", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output drafter directory")
    ap.add_argument("--model", default=None, help="target model (default: the bundled SmolLM2-135M)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--code-dir", default=None, help="Python sources (default: this interpreter's standard library)")
    ap.add_argument("--extra-code-dir", default=None, help="more Python sources to draw from, e.g. site-packages (held out "
                    "on their own: the --code-dir split does not move)")
    ap.add_argument("--extra-code-files", type=int, default=800, help="at most this many files from --extra-code-dir")
    ap.add_argument("--prose-dir", default=None, help="prose texts (.txt/.rst/.md), e.g. /usr/share/doc/python3.11/html/_sources")
    ap.add_argument("--target-layers", default=None, help="comma-separated target layers to condition on (default: 1, n/2, n-2)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=576)
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--markov-rank", type=int, default=64)
    ap.add_argument("--prompt-lens", default="256,512,1024")
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--data-seqs", type=int, default=10**9, help="stop generating after this many sequences")
    ap.add_argument("--data-fraction", type=float, default=0.4, help="share of --total-budget for generating data")
    ap.add_argument("--gen-batch", type=int, default=512)
    ap.add_argument("--chat-fraction", type=float, default=0.1)
    ap.add_argument("--prose-share", type=float, default=0.5, help="share of training prompts cut from prose (the rest code)")
    ap.add_argument("--eval-fraction", type=float, default=0.05, help="share of documents held out for evaluation")
    ap.add_argument("--eval-seqs", type=int, default=128, help="held-out sequences per prompt length")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--anchors", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--decay", type=float, default=4.0, help="position weight exp(-i/decay)")
    ap.add_argument("--conf-weight", type=float, default=0.2)
    ap.add_argument("--total-budget", type=float, default=540.0, help="wall-clock seconds for everything: load, data, training, export")
    ap.add_argument("--reserve", type=float, default=25.0, help="seconds kept at the end for evaluation and export")
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", default=None, help="a drafter directory to continue training (its configuration wins over "
                    "--layers, --ffn, --window, --markov-rank, --target-layers)")
    ap.add_argument("--data-seed", type=int, default=None,
                    help="seed of the training prompts (default: --seed); the held-out documents always follow --seed")
    return ap


def main(argv=None) -> int:
    train(build_parser().parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
