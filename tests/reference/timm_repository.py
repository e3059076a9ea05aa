# Writes a timm model repository exactly as timm saves one for the Hub (`save_for_hf`:
# config.json + model.safetensors, batch counters included) into a hub cache, plus a folder of
# photos of mixed sizes, and timm's own entropy for each photo (its evaluation transform and
# model, f32), for running `alkit score` on a real timm checkpoint without network:
#
#   python timm_repository.py CACHE PHOTOS [ARCH] [TAG] [N] [CLASSES] [SIDE]
#   HF_HUB_CACHE=CACHE HF_HUB_OFFLINE=1 alkit score --checkpoint hf:timm/ARCH.TAG \
#       --data PHOTOS --scorer entropy --out scores.csv
#
# ARCH: resnet18 (default), resnet34 or resnet50; TAG: a pretrained tag timm knows (its
# pretrained_cfg: input size, crop, interpolation, mean, std), default a1_in1k. The weights are
# timm's random initialisation (seed 0), with batch-norm statistics moved off their initial
# values so evaluation mode is not the identity. PHOTOS/timm_entropy.csv gets timm's entropy.
# CLASSES (default: the tag's, 1000) sets the head's size, as a fine-tuned checkpoint's; SIDE
# (default: the tag's, 224) the input size in the published config (timm then resizes and
# crops every photo to it, as alkit does).
import csv, os, sys
import numpy as np
import torch, torch.nn.functional as F
import timm
from timm.models import _hub
from PIL import Image

cache, photos = sys.argv[1], sys.argv[2]
arch = sys.argv[3] if len(sys.argv) > 3 else "resnet18"
tag = sys.argv[4] if len(sys.argv) > 4 else "a1_in1k"
n = int(sys.argv[5]) if len(sys.argv) > 5 else 16
classes = int(sys.argv[6]) if len(sys.argv) > 6 else None
side = int(sys.argv[7]) if len(sys.argv) > 7 else None
name = f"{arch}.{tag}"
torch.manual_seed(0)
model = timm.create_model(name, pretrained=False, **({"num_classes": classes} if classes else {})).eval()
if side:
    model.pretrained_cfg = {**model.pretrained_cfg, "input_size": (3, side, side)}
with torch.no_grad():
    for k, t in model.state_dict().items():
        if k.endswith("running_mean"):
            t.normal_(0.0, 0.1)
        elif k.endswith("running_var"):
            t.uniform_(0.5, 1.5)
commit = "0" * 40
snap = os.path.join(cache, f"models--timm--{name}", "snapshots", commit)
os.makedirs(snap, exist_ok=True)
os.makedirs(os.path.join(cache, f"models--timm--{name}", "refs"), exist_ok=True)
with open(os.path.join(cache, f"models--timm--{name}", "refs", "main"), "w") as f:
    f.write(commit)
_hub.save_for_hf(model, snap, safe_serialization=True)

os.makedirs(photos, exist_ok=True)
rng = np.random.default_rng(0)
transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))
rows = []
for i in range(n):
    h, w = int(rng.integers(120, 400)), int(rng.integers(120, 400))
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    a = np.stack([127 + 100 * np.sin(rng.uniform(0.01, 0.2) * x + rng.uniform(0.01, 0.2) * y + c)
                  for c in range(3)], -1)
    a = np.clip(a + rng.normal(0, 20, a.shape), 0, 255).astype(np.uint8)
    file = f"{i:04d}.png"
    Image.fromarray(a, "RGB").save(os.path.join(photos, file))
    with torch.no_grad():
        p = F.softmax(model(transform(Image.open(os.path.join(photos, file)).convert("RGB"))[None]), 1)[0]
    rows.append((file, float(-(p * p.clamp_min(1e-30).log()).sum())))
with open(os.path.join(photos, "timm_entropy.csv"), "w", newline="") as f:
    csv.writer(f).writerows([("id", "entropy")] + rows)
print(f"hf:timm/{name} in {cache}; {n} photos in {photos}; timm {timm.__version__}")
