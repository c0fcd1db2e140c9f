#!/usr/bin/env python3
"""generate.py — greedy generation with train_lm.py's model through our paged KV cache, checked
token for token against the same loop on PyTorch SDPA.

The model is scripts/train_lm.py's (imported; byte-level, 256 tokens), with random weights from
--seed (train_lm.py's initialisation), in fp32. B prompts of different lengths (--prompt-lens,
random tokens) are generated from greedily, --new-tokens each, by three loops that differ only
in their attention:

  ours        prefill: each prompt through our forward step (--prefill-step), its K and V
              written into a PagedKVCache (flash_tutorial.py: one pool per layer, pages handed
              out in shuffled order, a block table, the lengths); then every new token through
              our decoding step (flash_tutorial.decode: append its K/V into the pages, attend)
  sdpa        the same on PyTorch SDPA over its own contiguous cache [B, H, N_max, d]
  reference   sdpa again with the attention in fp32, fed sdpa's tokens (teacher forcing)

Attention runs in --dtype (fp16 by default, or bf16: what step 12 takes), everything else in
fp32. The script asserts that ours and sdpa produce the same tokens, and that their logits are
equally close to the reference's: at every step where both loops have seen the same tokens,
max |logits_ours - logits_ref| <= 2 * max |logits_sdpa - logits_ref| + 1e-3 * max |logits_ref|
(docs/conventions.md's factor for fp16 and bf16, the peer's error as the yardstick). It prints
tokens/s of both decoding loops (B tokens per step, prefill excluded) and, if the tokens
differ, the first divergence. Exit status 0 when both hold, 1 when not, 2 on bad arguments.

Why greedy tokens can legitimately differ. Our kernels and SDPA compute the same attention
with the sums in another order, so their fp16 outputs differ in the last bit now and then, and
the logits by some small delta. Greedy decoding takes the argmax: where the two best logits of
a step lie within 2 * delta of each other, rounding alone can pick either, and the sequences
part from there (each then continues its own text, so everything after differs too). A tie is
told from an error by the logits at the divergence: if ours are within the bound above of the
reference there, the argmax flipped on a tie within rounding; if not, the attention is wrong.
How it is avoided: everything but the attention runs in fp32 and the attention in fp16 (10
mantissa bits, where bf16 has 7), so delta is a small fraction of the logits' size (the run
prints it) and a tie that close is rare over a few hundred tokens. How it is reported: the
first divergence is printed with both loops' logits of the two tokens, the margin and delta,
and called a tie within rounding or an error; either way the sequences are not identical and
the exit status is 1, unless --allow-ties, which accepts a divergence that rounding explains
(then change --seed to see identical sequences).

Why the logits are checked too: with random weights the model tends to repeat a token, with a
margin wide enough that an attention that is slightly wrong (say, a key left out) can still
give the same tokens. The logits' distance from the reference shows such an error where the
tokens cannot. The defaults are meant to run in well under a minute on an H200 (B = 4, 128
tokens each, three loops).

    scripts/generate.py [--new-tokens 128] [--prompt-lens 19,64,100,143] [--page-size 16] ...
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_lm  # noqa: E402

DEVICE = "cuda"  # where the model, both loops and their caches live


def synchronize(torch):
    """Waits for the device (timing)."""
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def lengths(text):
    """argparse type: comma-separated prompt lengths, each >= 1."""
    try:
        values = [int(x, 10) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of "
                                         "integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every length must be at least 1")
    return values


def parse_args(argv=None):
    """The settings, checked (exit status 2 naming the option). Needs no PyTorch."""
    p = argparse.ArgumentParser(
        prog="scripts/generate.py",
        description="Greedy generation with train_lm.py's model (random weights): our paged "
                    "KV cache and decoding step against the same loop on PyTorch SDPA.")
    p.add_argument("--new-tokens", type=train_lm.positive, default=128,
                   help="tokens generated per sequence (default: 128)")
    p.add_argument("--prompt-lens", type=lengths, default=[19, 64, 100, 143],
                   help="prompt length of each sequence, comma-separated; the batch is their "
                        "count (default: 19,64,100,143)")
    p.add_argument("--page-size", type=train_lm.positive, default=16,
                   help="rows per page of our cache, 16..256 (default: 16)")
    p.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16",
                   help="the attention's dtype, both loops; the rest runs in fp32 "
                        "(default: fp16)")
    p.add_argument("--prefill-step", default="auto",
                   help="our forward step for the prompts (default auto: 09_warp_specialized "
                        "on compute capability 9.0, else 07_flash_attention_2)")
    p.add_argument("--decode-step", default="12_decode", help="our decoding step "
                                                              "(default: 12_decode)")
    p.add_argument("--d-model", type=train_lm.positive, default=512,
                   help="the model's width (default: 512, train_lm.py's)")
    p.add_argument("--heads", type=train_lm.positive, default=8,
                   help="attention heads (default: 8: head dim 64)")
    p.add_argument("--layers", type=train_lm.positive, default=6, help="blocks (default: 6)")
    p.add_argument("--seed", type=int, default=0, help="weights, prompts and pages (default: 0)")
    p.add_argument("--allow-ties", action="store_true",
                   help="accept a divergence that rounding explains (see the docstring)")
    args = p.parse_args(argv)
    if not 16 <= args.page_size <= 256:
        p.error(f"--page-size ({args.page_size}) must be in [16, 256]")
    if args.d_model % args.heads:
        p.error(f"--d-model ({args.d_model}) must be a multiple of --heads ({args.heads})")
    args.context = max(args.prompt_lens) + args.new_tokens  # the position embedding's length
    return args


class Ours:
    """Our attention: prefill by a forward step, decoding through a PagedKVCache."""

    def __init__(self, torch, ft, args, dtype, head_dim):
        self.torch, self.ft, self.args, self.dtype = torch, ft, args, dtype
        page, batch = args.page_size, len(args.prompt_lens)
        pages = sum(-(-(n + args.new_tokens) // page) for n in args.prompt_lens)
        self.cache = ft.PagedKVCache(batch, args.heads, head_dim, num_pages=pages + 8,
                                     max_pages=-(-args.context // page), page_size=page,
                                     layers=args.layers, dtype=dtype, device=DEVICE,
                                     seed=args.seed)
        self.prefilling = None  # the sequence being prefilled, None while decoding

    def __call__(self, q, k, v, layer):
        q, k, v = (t.to(self.dtype) for t in (q, k, v))
        if self.prefilling is not None:  # one prompt, [1, n, H, d]
            o, _ = self.ft.attention(q, k, v, step=self.args.prefill_step, causal=True,
                                     layout="bnhd")
            self.cache.append(layer, self.prefilling, k[0], v[0])
        else:  # one new token per sequence, [B, 1, H, d]
            o, _ = self.cache.decode(layer, q, k, v, step=self.args.decode_step)
        return o.float()

    def end_prefill(self, b, n):
        self.cache.advance(n, b)

    def end_step(self):
        self.cache.advance(1)


class Sdpa:
    """PyTorch SDPA over a contiguous cache [B, H, N_max, d] per layer."""

    def __init__(self, torch, args, dtype, head_dim):
        self.torch, self.dtype = torch, dtype
        shape = (len(args.prompt_lens), args.heads, args.context, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=DEVICE) for _ in range(args.layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=DEVICE) for _ in range(args.layers)]
        self.lengths = torch.zeros(len(args.prompt_lens), dtype=torch.long, device=DEVICE)
        self.longest = 0  # max(lengths), kept on the host: reading it back would wait for the GPU
        self.prefilling = None

    def __call__(self, q, k, v, layer):
        sdpa = self.torch.nn.functional.scaled_dot_product_attention
        q, k, v = (t.to(self.dtype).transpose(1, 2) for t in (q, k, v))  # [B, H, n, d]
        if self.prefilling is not None:
            b, n = self.prefilling, q.shape[2]
            self.k[layer][b, :, :n], self.v[layer][b, :, :n] = k[0], v[0]
            o = sdpa(q, k, v, is_causal=True)
        else:
            rows = self.torch.arange(q.shape[0], device=q.device)
            self.k[layer][rows, :, self.lengths] = k[:, :, 0]
            self.v[layer][rows, :, self.lengths] = v[:, :, 0]
            end = self.longest + 1
            keys = self.torch.arange(end, device=q.device)
            mask = (keys[None, :] <= self.lengths[:, None])[:, None, None, :]  # [B, 1, 1, end]
            o = sdpa(q, self.k[layer][:, :, :end], self.v[layer][:, :, :end], attn_mask=mask)
        return o.transpose(1, 2).float()

    def end_prefill(self, b, n):
        self.lengths[b] = n
        self.longest = max(self.longest, n)

    def end_step(self):
        self.lengths += 1
        self.longest += 1


def generate(torch, model, attention, prompts, args, forced=None):
    """Greedy generation: (tokens [B, T], logits [T, B, 256], prefill seconds, decode seconds).
    forced ([B, T]): feed these tokens instead of the argmax (teacher forcing)."""
    steps = args.new_tokens
    model.attention = attention
    with torch.no_grad():
        synchronize(torch)
        start = time.perf_counter()
        last = []
        for b, n in enumerate(args.prompt_lens):
            attention.prefilling = b
            last.append(model(prompts[b:b + 1, :n])[0, -1])
            attention.end_prefill(b, n)
        attention.prefilling = None
        logits = [torch.stack(last)]
        synchronize(torch)
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        tokens = []
        positions = torch.tensor(args.prompt_lens, device=DEVICE)[:, None]
        for t in range(steps):
            tokens.append(logits[-1].argmax(-1) if forced is None else forced[:, t])
            if t == steps - 1:
                break
            logits.append(model(tokens[-1][:, None], positions + t)[:, 0])
            attention.end_step()
        synchronize(torch)
        decode = time.perf_counter() - start
    return torch.stack(tokens, 1), torch.stack(logits), prefill, decode


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"generate.py: error: PyTorch is needed ({e})", file=sys.stderr)
        return 1
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("generate.py: error: no CUDA device (both loops run on the GPU)", file=sys.stderr)
        return 1
    import flash_tutorial as ft

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    head_dim = args.d_model // args.heads
    if args.prefill_step == "auto":
        args.prefill_step = ("09_warp_specialized" if torch.cuda.get_device_capability() == (9, 0)
                             else "07_flash_attention_2")
    problem = None
    if not ft.supports(args.prefill_step, dtype, head_dim):
        problem = (f"--prefill-step ({args.prefill_step}) cannot run head_dim {head_dim} in "
                   f"{args.dtype}")
    elif args.decode_step not in ft.decode_steps():
        problem = (f"--decode-step ({args.decode_step}) is not a decoding step; decoding steps: "
                   f"{', '.join(ft.decode_steps())}")
    if problem:
        print(f"generate.py: error: {problem}", file=sys.stderr)
        return 2

    torch.manual_seed(args.seed)

    def attend(q, k, v, layer):  # the model's attention: the loop's that runs (generate())
        return model.attention(q, k, v, layer)

    model = train_lm.build_model(args, torch, attend).to(DEVICE).eval()
    gen = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(0, 256, (len(args.prompt_lens), max(args.prompt_lens)),
                            generator=gen).to(DEVICE)
    print(f"generate: {len(args.prompt_lens)} prompts of {args.prompt_lens} tokens, "
          f"{args.new_tokens} new tokens each; {args.layers} layers, {args.heads} heads of "
          f"d = {head_dim}, attention in {args.dtype}; ours: prefill {args.prefill_step}, "
          f"decoding {args.decode_step} over pages of {args.page_size}; on "
          f"{torch.cuda.get_device_name() if DEVICE == 'cuda' else DEVICE}", flush=True)

    try:
        ours = generate(torch, model, Ours(torch, ft, args, dtype, head_dim), prompts, args)
    except (ft.FlashTutorialError, ValueError) as e:
        print(f"generate.py: error: our loop: {e}", file=sys.stderr)
        return 1
    sdpa = generate(torch, model, Sdpa(torch, args, dtype, head_dim), prompts, args)
    ref = generate(torch, model, Sdpa(torch, args, torch.float32, head_dim), prompts, args,
                   forced=sdpa[0])
    batch = len(args.prompt_lens)
    for name, run in (("ours", ours), ("sdpa", sdpa)):
        rate = batch * (args.new_tokens - 1) / run[3] if run[3] > 0 else float("inf")
        print(f"{name:5s} prefill {run[2] * 1e3:8.1f} ms, decoding {rate:10,.0f} tokens/s "
              f"({args.new_tokens - 1} steps of {batch} tokens in {run[3]:.2f} s)")

    # Where the two loops saw the same tokens: every step up to each sequence's first
    # divergence (the logits of step t follow tokens 0 .. t - 1).
    tok_o, tok_s = ours[0], sdpa[0]
    differ = tok_o != tok_s
    first = [int(row.nonzero()[0]) if row.any() else None for row in differ]
    comparable = torch.zeros(args.new_tokens, batch, dtype=torch.bool, device=DEVICE)
    for b, t in enumerate(first):
        comparable[:(args.new_tokens if t is None else t + 1), b] = True
    log_o, log_s, log_r = ours[1], sdpa[1], ref[1]

    def worst(x):
        return (x - log_r).abs().amax(-1)[comparable].max().item()

    err_o, err_s = worst(log_o), worst(log_s)
    bound = 2 * err_s + 1e-3 * log_r.abs().max().item()
    close = err_o <= bound
    print(f"logits against fp32 attention: ours {err_o:.2e}, sdpa {err_s:.2e}; bound "
          f"2 * sdpa + 1e-3 * max|logit| = {bound:.2e}: {'ok' if close else 'FAIL'}")
    identical = not differ.any()
    if identical:
        print(f"tokens: identical ({batch} x {args.new_tokens}); first of sequence 0: "
              f"{tok_o[0, :16].tolist()}")
    else:
        b = min((b for b, t in enumerate(first) if t is not None), key=lambda b: first[b])
        t = first[b]
        x, y = int(tok_o[b, t]), int(tok_s[b, t])
        delta = (log_o[t, b] - log_s[t, b]).abs().max().item()
        margin = (log_s[t, b, y] - log_s[t, b, x]).item()
        print(f"tokens: {int(differ.sum())} of {batch} x {args.new_tokens} differ; first: "
              f"sequence {b}, new token {t}: ours {x}, sdpa {y}")
        print(f"  logits of tokens {x} and {y}: ours {log_o[t, b, x].item():.6f} "
              f"{log_o[t, b, y].item():.6f}, sdpa {log_s[t, b, x].item():.6f} "
              f"{log_s[t, b, y].item():.6f}; sdpa's margin {margin:.2e}, |ours - sdpa| up to "
              f"{delta:.2e} at that step")
        print("  " + ("a tie within rounding: the logits agree within the bound and the two "
                      "best lie within rounding of each other" if close else
                      "an error: the logits differ beyond rounding"))
    ok = close and (identical or args.allow_ties)
    print(f"generate: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
