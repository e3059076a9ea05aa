# The PyTorch side of scripts/gpu-run.sh: the workloads of docs/reproductions.md's throughput
# rows, in PyTorch on the same device as alkit, f32, timed with the device synchronised. Not
# part of the test suite. Three subcommands:
#
#   python gpu_bench.py bench --device cuda --out ROWS.json [--profile gpu|smoke] [--tf32 off,on]
#                             [--photos DIR] [--only W1,W2] [--pass-s 1.0] [--repeats 3]
#   python gpu_bench.py photos DIR [--pool N] [--seed 0]      (standard library only)
#   python gpu_bench.py report --out DIR                       (standard library only)
#
# bench: one row per (workload, TF32 setting). Workloads (names shared with gpu-run.sh's alkit
# rows so the report pairs them):
#   cnn-entropy, cnn-bald, cnn-regrad, cnn-regrad-star   the standard CNN (conv 32 - pool - conv
#       64 - pool - fc 128 - dropout 0.5 - fc 10) on MNIST-shaped items (1x28x28), batch 256,
#       the pool on the host and each batch copied to the device, as `alkit bench` reads it;
#       scores copied back to the host. BALD: the trunk once, then T = 20 dropout masks on the
#       128 features (dropout sits before the last layer only). REGrad: per-sample, per-class
#       gradients of log p_c by torch.func (vmap of jacrev over a chunk), squared norms per
#       layer, sum_c sqrt(p_c sum_l exp(0.3 l) |g_lc|^2). REGrad*: the same gradient of the mean
#       of log p_c over the item and 8 copies with N(0, 0.02) noise.
#   resnet18-entropy, resnet18-regrad   ResNet-18, CIFAR stem, eval mode, 3x32x32 items (the
#       model of tests/reference/resnet18_model.py); REGrad as above.
#   cnn-curve-train     one `curve` cycle's training: a fresh CNN, 500 Adam steps (lr 1e-3) of
#       batch 32 on 40 labeled items (cycle 1 of the README's run); seconds per 500 steps.
#   duq-train-l0, duq-train-l0.5   the DUQ authors' Fashion-MNIST training step
#       (tests/reference/duq_fm_speed.py's model), batch 128, lambda 0 and 0.5; images/s.
#   resnet18-embed-forward   the frozen-backbone embedding: ResNet-18 (ImageNet stem, 64x64
#       items, as alkit prepares a folder of photos of mixed sizes) to its 512 pooled features,
#       batch 64, items already decoded; resnet18-embed-photos: the same from the PNG files of
#       --photos (Pillow decode, shorter side to 64, centre crop; the first 512), only where
#       Pillow imports.
#
# Timing: on CUDA each timed pass lies between two CUDA events (elapsed_time after the end
# event synchronises); on the CPU, perf_counter. Every row runs a warm-up pass first, then
# --repeats timed passes, and reports the median. Pools whose full size (65,536 items) would
# make a pass longer than --pass-s are cut to what fits (the row's `n` says how many). TF32:
# torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 both False (plain
# f32), then both True; each row records what both flag APIs then read, and the wall-clock
# window of its timed passes (t0, t1) for the utilisation report. On a CPU (the dry run) TF32
# changes nothing, so the `on` pass runs cnn-entropy alone.
#
# photos: writes DIR/pool/*.png (N photo-like RGB images of 120 to 400 pixels a side) and
# DIR/labeled/{train,test}/{a,b}/*.png (a small labeled set the backbone is trained on for one
# step), with zlib alone: no Pillow or numpy needed.
#
# report: joins DIR/alkit-rows.jsonl (gpu-run.sh), DIR/torch-rows.json (bench) and
# DIR/gpu-samples.csv (nvidia-smi's samples, when there are any) into DIR/figures.json and
# DIR/figures.md: one line per workload with alkit, PyTorch TF32 off and on, the ratio, and the
# GPU utilisation during each row's timed window.
import argparse
import json
import math
import os
import random
import statistics
import struct
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))

WORKLOADS = [
    "cnn-entropy", "cnn-bald", "cnn-regrad", "cnn-regrad-star",
    "resnet18-entropy", "resnet18-regrad",
    "cnn-curve-train", "duq-train-l0", "duq-train-l0.5",
    "resnet18-embed-forward", "resnet18-embed-photos",
]

# Sizes: full pool, probe size, chunk of the vmapped gradients, repeats.
PROFILES = {
    "gpu": dict(pool=65536, resnet_pool=65536, grad_chunk=256, star_chunk=64, resnet_chunk=16,
                curve_steps=500, duq_steps=10, embed_pool=4096, photo_max=512, pass_s=1.0, repeats=3),
    "smoke": dict(pool=512, resnet_pool=32, grad_chunk=16, star_chunk=4, resnet_chunk=1,
                  curve_steps=20, duq_steps=1, embed_pool=16, photo_max=16, pass_s=0.2, repeats=1),
}


# --------------------------------------------------------------------------- photos (stdlib)

def _png(path, w, h, rows):
    """Writes an 8-bit RGB PNG; `rows` yields h byte strings of w*3 bytes."""
    def chunk(kind, data):
        head = struct.pack(">I", len(data)) + kind + data
        return head + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + r for r in rows)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))


_SHIFT = [bytes((i + s) & 0xFF for i in range(256)) for s in range(256)]


def _photo_rows(rng, w, h):
    """A smooth two-colour gradient with a disc and row noise: photo-like, cheap in pure Python."""
    c0 = [rng.randrange(256) for _ in range(3)]
    c1 = [rng.randrange(256) for _ in range(3)]
    cx, cy, r = rng.randrange(w), rng.randrange(h), rng.randrange(10, max(11, min(w, h) // 2))
    dc = [rng.randrange(256) for _ in range(3)]
    # One row of the horizontal gradient per channel, reused with a shift per row.
    base = bytearray()
    for x in range(w):
        t = x / max(1, w - 1)
        base += bytes(int(c0[k] * (1 - t) + c1[k] * t) for k in range(3))
    for y in range(h):
        row = bytearray(base)
        dy = y - cy
        if abs(dy) < r:
            half = int(math.sqrt(r * r - dy * dy))
            x0, x1 = max(0, cx - half), min(w, cx + half)
            row[3 * x0:3 * x1] = bytes(dc) * (x1 - x0)
        yield bytes(row).translate(_SHIFT[(y * 7 + rng.randrange(3)) % 256]) if y % 3 == 0 else bytes(row)


def make_photos(out, pool, seed):
    rng = random.Random(seed)
    made = 0
    for sub, n in [("pool", pool)] + [(f"labeled/{s}/{c}", k) for s, k in (("train", 12), ("test", 4))
                                      for c in ("a", "b")]:
        d = os.path.join(out, sub)
        os.makedirs(d, exist_ok=True)
        for i in range(n):
            w, h = rng.randrange(120, 401), rng.randrange(120, 401)
            _png(os.path.join(d, f"{i:05d}.png"), w, h, _photo_rows(rng, w, h))
            made += 1
    return made


# --------------------------------------------------------------------------- report (stdlib)

def _samples(path):
    """nvidia-smi's CSV samples: (epoch seconds, utilisation %, memory MiB)."""
    out = []
    if not os.path.exists(path):
        return out
    for line in open(path):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        try:
            t = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S"))
            frac = float("0." + parts[0].split(".")[1]) if "." in parts[0] else 0.0
            out.append((t + frac, float(parts[1]), float(parts[2])))
        except (ValueError, IndexError):
            continue
    return out


def _util(samples, t0, t1):
    if t0 is None or t1 is None:
        return None
    inside = [s for s in samples if t0 - 0.05 <= s[0] <= t1 + 0.05]
    if not inside:
        return None
    return {"mean_pct": round(statistics.mean(s[1] for s in inside), 1),
            "max_pct": max(s[1] for s in inside), "samples": len(inside),
            "max_mem_mib": max(s[2] for s in inside)}


def report(out):
    samples = _samples(os.path.join(out, "gpu-samples.csv"))
    alkit = []
    p = os.path.join(out, "alkit-rows.jsonl")
    if os.path.exists(p):
        alkit = [json.loads(l) for l in open(p) if l.strip()]
    torch_doc = {}
    p = os.path.join(out, "torch-rows.json")
    if os.path.exists(p):
        torch_doc = json.load(open(p))
    trows = torch_doc.get("rows", [])
    for r in alkit + trows:
        r["gpu_util"] = _util(samples, r.get("t0"), r.get("t1"))
    table = []
    names = [w for w in WORKLOADS if any(r["workload"] == w for r in alkit + trows)]
    for w in names:
        a = next((r for r in alkit if r["workload"] == w), None)
        off = next((r for r in trows if r["workload"] == w and r.get("tf32") is False), None)
        on = next((r for r in trows if r["workload"] == w and r.get("tf32") is True), None)
        def v(r):
            return r.get("value") if r else None
        ratio = None
        if v(a) and v(off):
            hib = (a or off).get("higher_is_better", True)
            ratio = round(v(a) / v(off), 3) if hib else round(v(off) / v(a), 3)
        table.append({"workload": w, "unit": (a or off or on or {}).get("unit"),
                      "alkit": v(a), "alkit_n": a.get("n") if a else None,
                      "torch_tf32_off": v(off), "torch_tf32_on": v(on),
                      "torch_n": off.get("n") if off else (on.get("n") if on else None),
                      "alkit_over_torch_f32": ratio,
                      "util_alkit": (a or {}).get("gpu_util"), "util_torch_off": (off or {}).get("gpu_util"),
                      "util_torch_on": (on or {}).get("gpu_util"),
                      "skipped": [r.get("skipped") for r in (a, off, on) if r and r.get("skipped")]})
    doc = {"table": table, "alkit_rows": alkit, "torch": {k: v for k, v in torch_doc.items() if k != "rows"},
           "torch_rows": trows, "gpu_samples": len(samples)}
    json.dump(doc, open(os.path.join(out, "figures.json"), "w"), indent=1)
    def fmt(x):
        return "-" if x is None else (f"{x:,.1f}" if isinstance(x, float) else str(x))
    def ut(u):
        return "-" if not u else f"{u['mean_pct']:.0f}% (max {u['max_pct']:.0f})"
    lines = ["| workload | unit | alkit | PyTorch TF32 off | PyTorch TF32 on | alkit / PyTorch f32 | GPU util alkit | off | on |",
             "|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        lines.append(f"| {t['workload']} | {t['unit'] or '-'} | {fmt(t['alkit'])} | {fmt(t['torch_tf32_off'])} | "
                     f"{fmt(t['torch_tf32_on'])} | {fmt(t['alkit_over_torch_f32'])} | {ut(t['util_alkit'])} | "
                     f"{ut(t['util_torch_off'])} | {ut(t['util_torch_on'])} |")
    skipped = [f"- {t['workload']}: {s}" for t in table for s in t["skipped"]]
    if torch_doc.get("skipped"):
        skipped.append(f"- PyTorch side: {torch_doc['skipped']}")
    elif torch_doc and not torch_doc.get("finished"):
        skipped.append("- PyTorch side: stopped before its last row (logs/pytorch.log)")
    text = "\n".join(lines) + ("\n\nSkipped:\n" + "\n".join(skipped) if skipped else "") + "\n"
    open(os.path.join(out, "figures.md"), "w").write(text)
    print(text, end="")


# --------------------------------------------------------------------------- bench (torch)

def bench(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.func import functional_call, jacrev, vmap
    sys.path.insert(0, HERE)
    from resnet18_model import resnet, resnet18_cifar

    prof = dict(PROFILES[args.profile])
    if args.pass_s is not None:
        prof["pass_s"] = args.pass_s
    if args.repeats is not None:
        prof["repeats"] = args.repeats
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = []
    only = set(args.only.split(",")) if args.only else None
    started = time.time()

    cpu_tf32_on = False  # set per mode below

    def want(w):
        # TF32 does nothing on a CPU: there the `on` pass runs one row, to exercise the setting.
        if cpu_tf32_on and w != "cnn-entropy":
            return False
        return only is None or w in only

    def set_tf32(on):
        # The legacy flags: they keep both APIs' getters consistent (in 2.15, setting only
        # the new `fp32_precision` makes any read of the legacy flags raise).
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on
        flags = {"matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                 "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
                 "float32_matmul_precision": torch.get_float32_matmul_precision()}
        try:
            flags["matmul.fp32_precision"] = torch.backends.cuda.matmul.fp32_precision
            flags["cudnn.conv.fp32_precision"] = torch.backends.cudnn.conv.fp32_precision
        except (AttributeError, RuntimeError):
            pass
        return flags

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def timed_once(fn):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            return a.elapsed_time(b) / 1000.0
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    def measure(fn, repeats):
        """Warm-up, then `repeats` timed runs: (median seconds, runs, wall window)."""
        fn()
        sync()
        t0 = time.time()
        runs = [timed_once(fn) for _ in range(repeats)]
        t1 = time.time()
        return statistics.median(runs), runs, t0, t1

    def fit_n(pass_n, probe, full, mult):
        """The pool size whose pass takes about prof['pass_s'] (probe twice, the second timed)."""
        probe = min(probe, full)
        pass_n(probe)
        sync()
        t = timed_once(lambda: pass_n(probe))
        n = int(probe / max(t, 1e-9) * prof["pass_s"]) // mult * mult
        return max(probe, min(full, n))

    def row(workload, tf32, unit, value, **kw):
        r = {"workload": workload, "tf32": tf32, "unit": unit, "value": value,
             "higher_is_better": kw.pop("higher_is_better", True), "side": "pytorch", **kw}
        rows.append(r)
        print(json.dumps(r), flush=True)
        save()  # after every row: a run stopped by its time limit keeps what it measured

    def save():
        info["wall_s"] = round(time.time() - started, 1)
        info["rows"] = rows
        if cuda:
            info["max_memory_allocated_mib"] = round(torch.cuda.max_memory_allocated(dev) / 2**20)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(info, f, indent=1)
        os.replace(tmp, args.out)

    # ------------------------------------------------------------------ models
    class Cnn(nn.Module):
        def __init__(s):
            super().__init__()
            s.conv1 = nn.Conv2d(1, 32, 3)
            s.conv2 = nn.Conv2d(32, 64, 3)
            s.fc1 = nn.Linear(64 * 5 * 5, 128)
            s.fc2 = nn.Linear(128, 10)

        def trunk(s, x):
            x = F.max_pool2d(F.relu(s.conv1(x)), 2)
            x = F.max_pool2d(F.relu(s.conv2(x)), 2)
            return F.relu(s.fc1(x.flatten(1)))

        def forward(s, x):
            return s.fc2(F.dropout(s.trunk(x), 0.5, s.training))

    from duq_fm_model import Model as Duq  # the model duq_fm_speed.py times

    def entropy_of(p):
        return -(p * p.clamp_min(1e-30).log()).sum(-1)

    def grad_scorer(model, chunk, copies=0, sigma=0.02, lam=0.3):
        """A pass function of REGrad (copies = 0) or REGrad* (copies = N) over host items."""
        params = {k: v.detach() for k, v in model.named_parameters()}
        buffers = {k: v.detach() for k, v in model.named_buffers()}
        layers = []
        for k in params:
            m = k.rsplit(".", 1)[0]
            if not layers or layers[-1][0] != m:
                layers.append((m, []))
            layers[-1][1].append(k)
        a = torch.exp(lam * torch.arange(1, len(layers) + 1, dtype=torch.float32, device=dev))

        def logp(p, xi):
            xb = xi if xi.dim() == 4 else xi.unsqueeze(0)
            lp = F.log_softmax(functional_call(model, (p, buffers), (xb,)), 1).mean(0)
            return lp, lp

        jac = vmap(jacrev(logp, has_aux=True), in_dims=(None, 0))

        def scores(x):
            out = []
            for i in range(0, x.shape[0], chunk):
                xb = x[i:i + chunk].to(dev)
                if copies:
                    noise = sigma * torch.randn((xb.shape[0], copies + 1) + tuple(xb.shape[1:]), device=dev)
                    noise[:, 0] = 0
                    xb = xb.unsqueeze(1) + noise
                g, lp = jac(params, xb)
                sq = torch.stack([sum(g[k].flatten(2).square().sum(2) for k in names)
                                  for _, names in layers], 2)          # (B, C, L)
                s = (lp.exp() * (sq * a).sum(2)).sqrt().sum(1)
                out.append(s.cpu())
            return torch.cat(out)

        return scores

    def by_batches(fn, x, batch):
        out = [fn(x[i:i + batch].to(dev)).cpu() for i in range(0, x.shape[0], batch)]
        return torch.cat(out)

    tf32_modes = [m.strip() for m in args.tf32.split(",") if m.strip()]
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": str(dev),
            "profile": args.profile, "sizes": prof, "threads": torch.get_num_threads(),
            "cudnn_benchmark": torch.backends.cudnn.benchmark}
    if cuda:
        info["gpu"] = torch.cuda.get_device_name(dev)
        info["capability"] = list(torch.cuda.get_device_capability(dev))
    g = torch.Generator().manual_seed(0)
    x_cnn = torch.randn(prof["pool"], 1, 28, 28, generator=g)
    x_res = torch.randn(prof["resnet_pool"], 3, 32, 32, generator=g)
    photos = None
    if args.photos:
        pool = os.path.join(args.photos, "pool")
        photos = sorted(os.path.join(pool, f) for f in os.listdir(pool) if f.endswith(".png"))
        photos = photos[:prof["photo_max"]]
    pil = None
    try:
        from PIL import Image as pil
    except ImportError:
        pass

    for mode in tf32_modes:
        tf32 = mode == "on"
        cpu_tf32_on = tf32 and not cuda
        flags = set_tf32(tf32)
        reps = prof["repeats"]
        common = {"tf32_flags": flags}

        cnn = Cnn().to(dev).eval()
        if want("cnn-entropy"):
            def ent(n):
                with torch.inference_mode():
                    return by_batches(lambda xb: entropy_of(F.softmax(cnn(xb), 1)), x_cnn[:n], 256)
            n = fit_n(ent, 4096, prof["pool"], 256)
            med, runs, t0, t1 = measure(lambda: ent(n), reps)
            row("cnn-entropy", tf32, "samples/s", n / med, n=n, batch=256, runs_s=runs, t0=t0, t1=t1, **common)
        if want("cnn-bald"):
            def bald(n, t=20):
                def one(xb):
                    h = cnn.trunk(xb)
                    p = F.softmax(cnn.fc2(F.dropout(h.unsqueeze(0).expand(t, -1, -1), 0.5, True)), 2)
                    return entropy_of(p.mean(0)) - entropy_of(p).mean(0)
                with torch.inference_mode():
                    return by_batches(one, x_cnn[:n], 256)
            n = fit_n(bald, 4096, prof["pool"], 256)
            med, runs, t0, t1 = measure(lambda: bald(n), reps)
            row("cnn-bald", tf32, "samples/s", n / med, n=n, batch=256, mc_samples=20, runs_s=runs,
                t0=t0, t1=t1, **common)
        for w, copies, chunk in (("cnn-regrad", 0, prof["grad_chunk"]), ("cnn-regrad-star", 8, prof["star_chunk"])):
            if want(w):
                f = grad_scorer(cnn, chunk, copies)
                n = fit_n(lambda k: f(x_cnn[:k]), chunk, prof["pool"], chunk)
                med, runs, t0, t1 = measure(lambda: f(x_cnn[:n]), reps)
                row(w, tf32, "samples/s", n / med, n=n, chunk=chunk, perturbations=copies or None,
                    method="torch.func vmap(jacrev) per chunk", runs_s=runs, t0=t0, t1=t1, **common)

        res = resnet18_cifar(3, 10).to(dev).eval()
        if want("resnet18-entropy"):
            def rent(n):
                with torch.inference_mode():
                    return by_batches(lambda xb: entropy_of(F.softmax(res(xb), 1)), x_res[:n], 256)
            n = fit_n(rent, min(1024, prof["resnet_pool"]), prof["resnet_pool"], 256 if cuda else 1)
            med, runs, t0, t1 = measure(lambda: rent(n), reps)
            row("resnet18-entropy", tf32, "samples/s", n / med, n=n, batch=256, runs_s=runs, t0=t0, t1=t1,
                **common)
        if want("resnet18-regrad"):
            chunk = prof["resnet_chunk"]
            f = grad_scorer(res, chunk)
            n = fit_n(lambda k: f(x_res[:k]), chunk, prof["resnet_pool"], chunk)
            med, runs, t0, t1 = measure(lambda: f(x_res[:n]), reps)
            row("resnet18-regrad", tf32, "samples/s", n / med, n=n, chunk=chunk,
                method="torch.func vmap(jacrev) per chunk", runs_s=runs, t0=t0, t1=t1, **common)
        del res

        if want("cnn-curve-train"):
            xl = torch.randn(40, 1, 28, 28, generator=g)
            yl = torch.randint(0, 10, (40,), generator=g)
            steps = prof["curve_steps"]

            def cycle():
                torch.manual_seed(1)
                m = Cnn().to(dev).train()
                opt = torch.optim.Adam(m.parameters(), lr=1e-3)
                order, at = torch.randperm(40), 0
                for _ in range(steps):
                    if at + 32 > 40:
                        order, at = torch.randperm(40), 0
                    ids = order[at:at + 32]
                    at += 32
                    loss = F.cross_entropy(m(xl[ids].to(dev)), yl[ids].to(dev))
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            med, runs, t0, t1 = measure(cycle, reps)
            row("cnn-curve-train", tf32, f"s per {steps} Adam steps", med, higher_is_better=False,
                steps=steps, batch=32, labeled=40, steps_per_s=steps / med, runs_s=runs, t0=t0, t1=t1,
                **common)

        for lam, w in ((0.0, "duq-train-l0"), (0.5, "duq-train-l0.5")):
            if not want(w):
                continue
            torch.manual_seed(0)
            model = Duq().to(dev)
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
            xa = torch.randn(128 * 20, 1, 28, 28, generator=g)
            ya = F.one_hot(torch.randint(0, 10, (128 * 20,), generator=g), 10).float()
            steps = prof["duq_steps"]

            def step(x, y):
                model.train(); opt.zero_grad()
                if lam > 0:
                    x.requires_grad_(True)
                z, yp = model(x)
                loss = F.binary_cross_entropy(yp, y)
                if lam > 0:
                    gx = torch.autograd.grad(yp, x, torch.ones_like(yp), create_graph=True)[0].flatten(1)
                    loss = loss + lam * ((gx.norm(2, dim=1) - 1) ** 2).mean()
                loss.backward(); opt.step(); x.requires_grad_(False)
                with torch.no_grad():
                    model.eval(); model.update_embeddings(x, y)

            def run():
                for i in range(steps):
                    step(xa[128 * i:128 * (i + 1)].to(dev), ya[128 * i:128 * (i + 1)].to(dev))
            for i in range(4 if args.profile == "gpu" else 1):
                step(xa[:128].to(dev), ya[:128].to(dev))
            med, runs, t0, t1 = measure(run, reps)
            row(w, tf32, "images/s", steps * 128 / med, steps=steps, batch=128, penalty_weight=lam,
                runs_s=runs, t0=t0, t1=t1, **common)

        if want("resnet18-embed-forward") or want("resnet18-embed-photos"):
            back = resnet(18, 3, 2, "imagenet").to(dev).eval()
            back.fc = nn.Identity()
            if want("resnet18-embed-forward"):
                xe = torch.randn(prof["embed_pool"], 3, 64, 64, generator=g)

                def emb(n):
                    with torch.inference_mode():
                        return by_batches(back, xe[:n], 64)
                n = fit_n(emb, min(256, prof["embed_pool"]), prof["embed_pool"], 64 if cuda else 1)
                med, runs, t0, t1 = measure(lambda: emb(n), reps)
                row("resnet18-embed-forward", tf32, "images/s", n / med, n=n, batch=64, features=512,
                    runs_s=runs, t0=t0, t1=t1, **common)
            if want("resnet18-embed-photos"):
                if photos is None or pil is None:
                    why = "no --photos" if photos is None else "Pillow is not importable"
                    row("resnet18-embed-photos", tf32, "images/s", None, skipped=why, **common)
                else:
                    mean = torch.tensor([0.5, 0.5, 0.5]).view(3, 1, 1)

                    def load(path):
                        im = pil.open(path).convert("RGB")
                        w, h = im.size
                        s = 64 / min(w, h)
                        im = im.resize((max(64, round(w * s)), max(64, round(h * s))), pil.BILINEAR)
                        w, h = im.size
                        l, t = (w - 64) // 2, (h - 64) // 2
                        im = im.crop((l, t, l + 64, t + 64))
                        x = torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8)
                        return (x.view(64, 64, 3).permute(2, 0, 1).float() / 255 - mean) / 0.5

                    def photo_pass():
                        out = []
                        with torch.inference_mode():
                            for i in range(0, len(photos), 64):
                                xb = torch.stack([load(p) for p in photos[i:i + 64]])
                                out.append(back(xb.to(dev)).cpu())
                        return torch.cat(out)
                    med, runs, t0, t1 = measure(photo_pass, reps)
                    row("resnet18-embed-photos", tf32, "images/s", len(photos) / med, n=len(photos), batch=64,
                        decode="Pillow, one process, one thread", runs_s=runs, t0=t0, t1=t1, **common)
            del back
        if cuda:
            torch.cuda.empty_cache()
    info["finished"] = True
    save()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--device", default="cuda")
    b.add_argument("--out", required=True)
    b.add_argument("--profile", choices=sorted(PROFILES), default="gpu")
    b.add_argument("--tf32", default="off,on", help="comma-separated: off, on")
    b.add_argument("--photos", help="the folder `photos` wrote (its pool/ is embedded)")
    b.add_argument("--only", help="comma-separated workloads")
    b.add_argument("--pass-s", type=float, help="target seconds of one timed pass")
    b.add_argument("--repeats", type=int)
    b.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    p = sub.add_parser("photos")
    p.add_argument("dir")
    p.add_argument("--pool", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("report")
    r.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.cmd == "bench":
        bench(args)
    elif args.cmd == "photos":
        t = time.perf_counter()
        n = make_photos(args.dir, args.pool, args.seed)
        print(f"wrote {n} PNG photos under {args.dir} in {time.perf_counter() - t:.1f} s")
    else:
        report(args.out)


if __name__ == "__main__":
    main()
