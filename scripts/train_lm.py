#!/usr/bin/env python3
"""train_lm.py — a small causal transformer language model trained through our attention.

Byte-level tokens (256 of them) from the tutorial's own chapters (docs/*.md, concatenated in
name order; the last tenth held out for validation), a learned position embedding, pre-norm
blocks (LayerNorm, attention, LayerNorm, MLP), a final LayerNorm and an output layer tied to
the token embedding. --attention ours runs every attention through
flash_tutorial.flash_attention (a forward step, then a backward step, through
torch.autograd); --attention sdpa through PyTorch's scaled_dot_product_attention. Both runs
start from the same weights and see the same batches (--seed), so their loss curves can be
laid over each other (scripts/plot_lm.py):

    scripts/train_lm.py --attention ours --out lm_ours.json
    scripts/train_lm.py --attention sdpa --out lm_sdpa.json
    scripts/plot_lm.py lm_ours.json lm_sdpa.json --out docs/images/lm_loss.png

The log (JSON) holds the settings, the steps that ran, the training loss and tokens/s of
every step and the validation loss every --eval-every steps.

The defaults (d_model 512 = 8 heads of d = 64, 6 layers, context 1024, batch 16, 300 steps)
make a model of about 20 M parameters, sized to finish in about a minute per run on an H200
(measured there: about a million tokens per second, docs/results/h200-lm.md): d = 64 is a head dim every attention step accepts; a context
of 1024 makes attention a real share of each step (causal, about a seventh of a block's FLOPs,
2·N·d_model per token against the projections' and MLP's 24·d_model², and more of its time);
and 300 steps of 16 K tokens (about 13 passes over the training text) are enough for the two
curves to be compared over the whole descent while a run stays short. The validation loss
shows when the model starts to memorise the text.
"""
import argparse
import contextlib
import glob
import json
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def positive(text):
    """argparse type: an integer >= 1."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def positive_float(text):
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{value} must be finite and > 0")
    return value


def parse_args(argv=None):
    """The settings, checked (exit status 2 with a message naming the option on bad input).
    Needs no PyTorch."""
    p = argparse.ArgumentParser(
        prog="scripts/train_lm.py",
        description="Train a small byte-level causal transformer on docs/*.md, with our "
                    "attention kernels or PyTorch SDPA.")
    p.add_argument("--attention", choices=("ours", "sdpa"), default="ours",
                   help="ours: flash_tutorial.flash_attention; sdpa: PyTorch (default: ours)")
    p.add_argument("--forward-step", default="auto",
                   help="forward step for --attention ours (default auto: 09_warp_specialized "
                        "on compute capability 9.0, else 07_flash_attention_2; 04 for fp32)")
    p.add_argument("--backward-step", default="auto",
                   help="backward step for --attention ours (default auto: the last registered "
                        "one that takes --dtype, else the last that takes fp32, run in fp32)")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16",
                   help="activations (autocast; the weights stay fp32) (default: bf16)")
    p.add_argument("--d-model", type=positive, default=512, help="width (default: 512)")
    p.add_argument("--heads", type=positive, default=8, help="attention heads (default: 8)")
    p.add_argument("--layers", type=positive, default=6, help="blocks (default: 6)")
    p.add_argument("--context", type=positive, default=1024,
                   help="tokens per sequence (default: 1024)")
    p.add_argument("--batch", type=positive, default=16, help="sequences per step (default: 16)")
    p.add_argument("--steps", type=positive, default=300, help="optimizer steps (default: 300)")
    p.add_argument("--lr", type=positive_float, default=6e-4,
                   help="peak learning rate of AdamW (default: 6e-4)")
    p.add_argument("--warmup", type=int, default=30,
                   help="steps of linear warmup, then cosine decay to a tenth (default: 30)")
    p.add_argument("--eval-every", type=positive, default=50,
                   help="validation loss every this many steps, and at the end (default: 50)")
    p.add_argument("--eval-batches", type=positive, default=8,
                   help="batches of held-out text per validation (default: 8)")
    p.add_argument("--seed", type=int, default=0, help="weights and batches (default: 0)")
    p.add_argument("--text", default=os.path.join(ROOT, "docs", "*.md"),
                   help="glob of the training text (default: docs/*.md of this repository)")
    p.add_argument("--out", default=None,
                   help="the JSON log (default: lm_<attention>.json in this folder)")
    p.add_argument("--profile", default=None, metavar="FILE",
                   help="profile the last --profile-steps steps with torch.profiler and write "
                        "the GPU time per kernel and per operator to FILE (those steps' "
                        "times are left out of the median tokens/s)")
    p.add_argument("--profile-steps", type=positive, default=3,
                   help="steps profiled with --profile (default: 3)")
    args = p.parse_args(argv)
    if args.d_model % args.heads:
        p.error(f"--d-model ({args.d_model}) must be a multiple of --heads ({args.heads})")
    if not 0 <= args.warmup < args.steps:
        p.error(f"--warmup ({args.warmup}) must be in 0 .. --steps - 1 ({args.steps - 1})")
    if args.profile:
        if args.profile_steps >= args.steps:
            p.error(f"--profile-steps ({args.profile_steps}) must be below --steps ({args.steps})")
        first = args.steps - args.profile_steps + 1
        inside = [s for s in range(first, args.steps) if s % args.eval_every == 0]
        if inside:
            p.error(f"--profile: a validation at step {inside[0]} would fall inside the profiled "
                    f"steps {first} .. {args.steps}; choose --eval-every or --profile-steps so "
                    "that none does (the last step's comes after the profile)")
        folder = os.path.dirname(os.path.abspath(args.profile))
        if not os.path.isdir(folder):
            p.error(f"--profile: the folder {folder} does not exist")
    files = sorted(glob.glob(args.text))
    if not files:
        p.error(f"--text: no file matches {args.text!r}")
    args.files = files
    if args.out is None:
        args.out = f"lm_{args.attention}.json"
    return args


def die(message, status=2):
    """One line on stderr, then exit (status 2: bad input, as for the argument errors)."""
    print(f"train_lm.py: error: {message}", file=sys.stderr)
    raise SystemExit(status)


def load_text(files, context):
    """The files' bytes, concatenated: (train, validation), the last tenth held out. Each
    part must hold at least one sequence of context + 1 bytes."""
    data = b"".join(open(f, "rb").read() for f in files)
    split = len(data) - len(data) // 10
    train, val = data[:split], data[split:]
    if len(val) < context + 1:
        die(f"--context ({context}) needs {context + 1} bytes of validation text; --text holds "
            f"{len(data)} bytes, a tenth of it is {len(val)}")
    return train, val


def choose_steps(args, torch, ft):
    """(forward step, backward step, backward dtype) for --attention ours, checked against the
    registry: an exit with a message naming the option when a step cannot run the model."""
    dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[args.dtype]
    head_dim = args.d_model // args.heads
    forward = args.forward_step
    if forward == "auto":
        if args.dtype == "fp32":
            forward = "04_flash_attention"
        elif torch.cuda.get_device_capability() == (9, 0):
            forward = "09_warp_specialized"
        else:
            forward = "07_flash_attention_2"
    backward, backward_dtype = args.backward_step, None
    if backward == "auto":
        direct = [s for s in ft.backward_steps() if ft.supports(s, dtype, head_dim)]
        in_fp32 = [s for s in ft.backward_steps() if ft.supports(s, "float32", head_dim)]
        if direct:
            backward = direct[-1]
        elif in_fp32:
            backward, backward_dtype = in_fp32[-1], torch.float32
        else:
            die(f"no backward step takes head_dim {head_dim} (--d-model / --heads) in "
                f"{args.dtype} or fp32; backward steps: {', '.join(ft.backward_steps())}")
    elif not ft.supports(backward, dtype, head_dim) and ft.supports(backward, "float32", head_dim):
        backward_dtype = torch.float32
    for kind, step, want, names in (
            ("forward", forward, dtype, ft.forward_steps()),
            ("backward", backward, "float32" if backward_dtype else dtype, ft.backward_steps())):
        option = f"--{kind}-step"
        # As the C API finds a step: its folder name, its number ("09", "9") or its slug.
        found = [n for n in names if step in (n, n.split("_", 1)[1])
                 or step.isdigit() and int(step, 10) == int(n.split("_", 1)[0], 10)]
        if not found:
            die(f"{option} ({step}) is not a {kind} step; the {kind} steps: {', '.join(names)}")
        step = found[0]
        if not ft.supports(step, want, head_dim):
            die(f"{option} ({step}) cannot run head_dim {head_dim} (--d-model / --heads) in "
                f"{want}")
        forward, backward = (step, backward) if kind == "forward" else (forward, step)
    return forward, backward, backward_dtype


def build_model(args, torch, attend):
    """The language model; `attend(q, k, v, layer)` maps [B, N, H, d] to [B, N, H, d], causal
    (layer: the block's index, 0 .. args.layers - 1, for an attention that keeps a cache per
    layer, as scripts/generate.py's)."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.layer = layer
            self.norm1, self.norm2 = nn.LayerNorm(args.d_model), nn.LayerNorm(args.d_model)
            self.qkv = nn.Linear(args.d_model, 3 * args.d_model, bias=False)
            self.proj = nn.Linear(args.d_model, args.d_model, bias=False)
            self.mlp = nn.Sequential(nn.Linear(args.d_model, 4 * args.d_model), nn.GELU(),
                                     nn.Linear(4 * args.d_model, args.d_model))

        def forward(self, x):
            b, n, _ = x.shape
            # One projection; q, k and v are strided [B, N, H, d] views of it (bnhd).
            q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, args.heads, -1).unbind(2)
            x = x + self.proj(attend(q, k, v, self.layer).reshape(b, n, args.d_model))
            return x + self.mlp(self.norm2(x))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(256, args.d_model)
            self.pos = nn.Embedding(args.context, args.d_model)
            self.blocks = nn.ModuleList(Block(i) for i in range(args.layers))
            self.norm = nn.LayerNorm(args.d_model)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        def forward(self, tokens, positions=None):
            """Logits [B, N, 256] of tokens [B, N] at `positions` ([B, N]; None: 0 .. N - 1,
            a whole sequence; a decoding step passes where its new tokens stand)."""
            if positions is None:
                positions = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.embed(tokens) + self.pos(positions)
            for block in self.blocks:
                x = block(x)
            return self.norm(x) @ self.embed.weight.t()  # the output layer tied to the embedding

    return LM()


def write_profile(profiler, args, how, steps):
    """The profiled steps' GPU time per kernel and per operator (torch.profiler's own tables),
    the largest first, into args.profile."""
    events = profiler.key_averages()
    sort = "self_device_time_total"
    if not hasattr(events[0] if len(events) else None, sort):
        sort = "self_cuda_time_total"  # PyTorch before 2.4
    with open(args.profile, "w") as f:
        f.write(f"# torch.profiler over {steps} training steps of scripts/train_lm.py, attention "
                f"{how}, {args.batch} x {args.context} tokens per step; times are totals over "
                "those steps\n\n")
        f.write(events.table(sort_by=sort, row_limit=60, max_name_column_width=90))
        f.write("\n")


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"train_lm.py: error: PyTorch is needed to train ({e})", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("train_lm.py: error: no CUDA device (both attentions run on the GPU)",
              file=sys.stderr)
        return 1
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import flash_tutorial as ft

    train_bytes, val_bytes = load_text(args.files, args.context)
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[args.dtype]
    steps = {"forward": None, "backward": None, "backward_dtype": None}
    if args.attention == "ours":
        forward, backward, backward_dtype = choose_steps(args, torch, ft)
        steps = {"forward": forward, "backward": backward,
                 "backward_dtype": str(backward_dtype).replace("torch.", "")
                 if backward_dtype else None}

        def attend(q, k, v, layer):
            return ft.flash_attention(q, k, v, causal=True, layout="bnhd", forward_step=forward,
                                      backward_step=backward, backward_dtype=backward_dtype)
    else:
        def attend(q, k, v, layer):
            o = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            return o.transpose(1, 2)

    device = torch.device("cuda")
    torch.manual_seed(args.seed)  # the same weights for both attentions
    model = build_model(args, torch, attend).to(device)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    # Loss scaling for fp16 only (bf16 has fp32's exponent range).
    if hasattr(torch.amp, "GradScaler"):
        scaler = torch.amp.GradScaler("cuda", enabled=amp == torch.float16)
    else:  # PyTorch before 2.3
        scaler = torch.cuda.amp.GradScaler(enabled=amp == torch.float16)

    train = torch.frombuffer(bytearray(train_bytes), dtype=torch.uint8).to(device).long()
    val = torch.frombuffer(bytearray(val_bytes), dtype=torch.uint8).to(device).long()
    offsets = torch.arange(args.context + 1, device=device)

    def batch(data, gen):
        starts = torch.randint(len(data) - args.context, (args.batch,), generator=gen)
        seq = data[starts.to(device)[:, None] + offsets]
        return seq[:, :-1], seq[:, 1:]

    def loss_of(tokens, targets):
        with torch.autocast("cuda", dtype=amp) if amp else contextlib.nullcontext():
            logits = model(tokens)
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, 256),
                                                 targets.reshape(-1))

    def lr_at(step):  # step counts from 1
        if step <= args.warmup:
            return args.lr * step / args.warmup
        t = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * t)))

    def validate():
        gen = torch.Generator().manual_seed(args.seed + 1)  # the same slices every time
        model.eval()
        with torch.no_grad():
            total = sum(loss_of(*batch(val, gen)).item() for _ in range(args.eval_batches))
        model.train()
        return total / args.eval_batches

    log = {"attention": args.attention, **steps, "device": torch.cuda.get_device_name(),
           "torch": torch.__version__, "parameters": params,
           "train_bytes": len(train_bytes), "val_bytes": len(val_bytes),
           "settings": {k: v for k, v in vars(args).items() if k not in ("out", "files")},
           "text_files": [os.path.relpath(f, ROOT) for f in args.files],
           "train": [], "val": []}
    how = "PyTorch SDPA"
    if args.attention == "ours":
        how = f"ours: forward {steps['forward']}, backward {steps['backward']}"
        if steps["backward_dtype"]:
            how += f" (run in {steps['backward_dtype']})"
    print(f"train_lm: {args.dtype}, attention {how}, {params / 1e6:.1f} M parameters, "
          f"{len(train_bytes)} bytes of training text, {len(val_bytes)} held out, on "
          f"{log['device']}", flush=True)

    gen = torch.Generator().manual_seed(args.seed)  # the same batches for both attentions
    tokens_per_step = args.batch * args.context
    first_profiled = args.steps - args.profile_steps + 1 if args.profile else args.steps + 1
    profiler = None

    def close_profiler(steps_done):
        nonlocal profiler
        if profiler is not None:
            profiler.__exit__(None, None, None)
            write_profile(profiler, args, how, steps_done)
            profiler = None

    for step in range(1, args.steps + 1):
        if step == first_profiled:
            profiler = torch.profiler.profile(activities=[
                torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA])
            profiler.__enter__()
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        tokens, targets = batch(train, gen)
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = loss_of(tokens, targets)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        value = loss.item()  # waits for the step
        seconds = time.perf_counter() - start
        log["train"].append({"step": step, "loss": value, "lr": lr_at(step), "seconds": seconds,
                             "tokens_per_s": tokens_per_step / seconds,
                             "profiled": step >= first_profiled})
        if step == args.steps:  # the profile ends before the last validation
            close_profiler(step - first_profiled + 1)
        if not math.isfinite(value):
            print(f"train_lm: step {step}: the loss is {value}; stopping", file=sys.stderr)
            close_profiler(step - first_profiled + 1)
            break
        if step % args.eval_every == 0 or step == args.steps:
            log["val"].append({"step": step, "loss": validate()})
            print(f"step {step:5d}  loss {value:.4f}  val {log['val'][-1]['loss']:.4f}  "
                  f"{tokens_per_step / seconds:,.0f} tokens/s", flush=True)

    timed = [r for r in log["train"] if not r["profiled"]]
    rates = sorted(r["tokens_per_s"] for r in timed[min(10, len(timed) - 1):])
    if len(timed) <= 10:
        print(f"train_lm: note: only {len(timed)} unprofiled steps; the median is of the last",
              file=sys.stderr)
    log["median_tokens_per_s"] = rates[len(rates) // 2] if rates else None
    log["completed_steps"] = len(log["train"])
    with open(args.out, "w") as f:
        json.dump(log, f, indent=1)
    print(f"train_lm: wrote {args.out}; median {log['median_tokens_per_s']:,.0f} tokens/s "
          "(after the first 10 steps, profiled steps left out)")
    return 0 if log["completed_steps"] == args.steps else 1


if __name__ == "__main__":
    sys.exit(main())
