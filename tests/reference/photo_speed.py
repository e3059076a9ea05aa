# The PyTorch pipeline that `alkit bench --photos DIR --checkpoint hf:timm/NAME` is compared
# with: what a timm user runs to score a folder of photos with entropy. Pillow decodes each
# photo (`Image.open(..).convert("RGB")`), timm's evaluation transform for the model
# (`resolve_data_config` + `create_transform`: resize, centre crop, to tensor, normalise)
# prepares it, batches of BATCH go through the model under `torch.inference_mode`, and the
# entropy of each softmax row is read out. Not part of the test suite.
#
#   HF_HUB_CACHE=CACHE HF_HUB_OFFLINE=1 python photo_speed.py PHOTOS NAME [THREADS] [REPEATS] [BATCH] [SCORER]
#
# SCORER `regrad` times the per-class gradient norms REGrad is made of instead, the way a
# PyTorch user computes per-sample gradients: a loop over photos, one forward each, one
# backward per class, every parameter's squared gradient norm (REGrad's layer weights and sum
# over classes cost nothing beside them).
#
# NAME: a timm repository in the Hub cache (`timm/resnet18.a1_in1k`; `timm_repository.py`
# writes one without network). Prints one JSON line:
#   load_s    - timm.create_model with the cached weights (after `import torch, timm`)
#   first_s   - the first pass over the folder (decode + transform + forward + entropy)
#   passes_s  - REPEATS further passes; images_per_s is the folder's size over their best
#   process_s - from the interpreter's start to the end of the first pass (imports included)
import json, os, sys, time

started = time.perf_counter()
import torch, torch.nn.functional as F  # noqa: E402
import timm  # noqa: E402
from PIL import Image  # noqa: E402

photos, name = sys.argv[1], sys.argv[2]
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 3
batch = int(sys.argv[5]) if len(sys.argv) > 5 else 64
scorer = sys.argv[6] if len(sys.argv) > 6 else "entropy"
assert scorer in ("entropy", "regrad"), scorer
torch.set_num_threads(threads)
exts = (".png", ".jpg", ".jpeg", ".webp")
files = sorted(os.path.join(photos, f) for f in os.listdir(photos) if f.lower().endswith(exts))

t = time.perf_counter()
model = timm.create_model(f"hf-hub:{name}", pretrained=True).eval()
transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))
load_s = time.perf_counter() - t


def one_pass():
    out = []
    with torch.inference_mode():
        for i in range(0, len(files), batch):
            x = torch.stack([transform(Image.open(f).convert("RGB")) for f in files[i:i + batch]])
            p = F.softmax(model(x), 1)
            out.extend((-(p * p.clamp_min(1e-30).log()).sum(1)).tolist())
    return out


def regrad_pass():
    params = [p for p in model.parameters() if p.requires_grad]
    out = []
    for f in files:
        x = transform(Image.open(f).convert("RGB"))[None]
        lp = F.log_softmax(model(x), 1)[0]
        p, total = lp.exp(), 0.0
        for c in range(lp.numel()):
            g = torch.autograd.grad(lp[c], params, retain_graph=c + 1 < lp.numel())
            total += float(p[c]) ** 0.5 * sum(float(gi.square().sum()) for gi in g) ** 0.5
        out.append(total)
    return out


if scorer == "regrad":
    one_pass = regrad_pass  # noqa: F811

t = time.perf_counter()
scores = one_pass()
first_s = time.perf_counter() - t
process_s = time.perf_counter() - started
passes_s = []
for _ in range(repeats):
    t = time.perf_counter()
    one_pass()
    passes_s.append(time.perf_counter() - t)
print(json.dumps({
    "images": len(files), "threads": threads, "batch": batch, "scorer": scorer,
    "input_size": list(model.pretrained_cfg["input_size"]),
    "torch": torch.__version__, "timm": timm.__version__,
    "load_s": round(load_s, 4), "first_s": round(first_s, 4), "process_s": round(process_s, 4),
    "passes_s": [round(s, 4) for s in passes_s],
    "images_per_s": round(len(files) / min(passes_s), 2) if passes_s else None,
    "first_images_per_s": round(len(files) / (load_s + first_s), 2),
    "scores_head": [round(e, 6) for e in scores[:3]],
}))
