# Writes what `timm::a_timm_repository_prepares_and_scores_as_timm_does` compares with: a timm
# ResNet-18 (ImageNet stem, 5 classes, 64x64 input, crop 0.875, bicubic, its own mean and std)
# as timm itself creates, configures and prepares it.
#
# - tests/fixtures/timm_resnet18/config.json: timm's `save_config_for_hf` output, as a Hub
#   repository holds it (the weights are not shipped: the Rust test writes model.safetensors
#   from the same formula as resnet18_reference.py, batch counters included, into a hub cache);
# - tests/fixtures/timm_photos/{a,b,c}.png: three photos of other sizes (RGB 97x80, grayscale
#   50x120, RGB 64x64), drawn by a formula;
# - timm_reference.json: per photo, the 8-bit pixels after timm's resize and centre crop
#   (PIL), the f64 logits of the model on them (normalised in f64), REGrad's per-class,
#   per-layer squared gradient norms in f64 (a layer is a module with parameters, in
#   registration order), the entropy of timm's own f32 pipeline (transform + model), and
#   hashes of Pillow's resize of each photo to squares of three sides with each filter.
#
# Usage: python timm_reference.py  (needs torch, timm, pillow, numpy; run from tests/reference)
import json, math, os
import numpy as np
import torch, torch.nn.functional as F
import timm
from timm.models import _hub
import PIL
from PIL import Image
from resnet18_model import formula

# Pillow 13 chose a new pass order for some sizes (alkit follows it; see src/data/resample.rs).
assert int(PIL.__version__.split(".")[0]) >= 13, f"Pillow {PIL.__version__}: record with Pillow 13"
here = os.path.dirname(os.path.abspath(__file__))
fixtures = os.path.join(here, "..", "fixtures")
photos = os.path.join(fixtures, "timm_photos")
repo = os.path.join(fixtures, "timm_resnet18")
os.makedirs(photos, exist_ok=True)
os.makedirs(repo, exist_ok=True)

def photo(h, w, channels, k):
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    planes = []
    for c in range(channels):
        v = 127.5 + 90 * np.sin(0.11 * (c + k) * x + 0.07 * y) * np.cos(0.05 * x - 0.13 * (k + 1) * y)
        v += 30 * ((x // 7 + y // 5 + c) % 2)
        planes.append(np.clip(np.round(v), 0, 255).astype(np.uint8))
    a = planes[0] if channels == 1 else np.stack(planes, -1)
    return Image.fromarray(a, "L" if channels == 1 else "RGB")

names = ["a.png", "b.png", "c.png"]
for name, (h, w, c, k) in zip(names, [(97, 80, 3, 1), (50, 120, 1, 2), (64, 64, 3, 3)]):
    photo(h, w, c, k).save(os.path.join(photos, name))

classes = 5
mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
model = timm.create_model(
    "resnet18", pretrained=False, num_classes=classes,
    pretrained_cfg_overlay=dict(input_size=(3, 64, 64), crop_pct=0.875, interpolation="bicubic",
                                crop_mode="center", mean=mean, std=std)).eval()
with torch.no_grad():
    for name, t in model.state_dict().items():
        if not name.endswith("num_batches_tracked"):
            t.copy_(formula(name, list(t.shape)).to(t.dtype))
_hub.save_config_for_hf(model, os.path.join(repo, "config.json"),
                        model_config={"label_names": ["ant", "bee", "cat", "dog", "eel"]})

cfg = timm.data.resolve_data_config({}, model=model)
transform = timm.data.create_transform(**cfg)
crop = transform.transforms[:2]  # Resize, CenterCrop: PIL in, PIL out
pixels, entropy = [], []
for name in names:
    img = Image.open(os.path.join(photos, name)).convert("RGB")
    c = img
    for t in crop:
        c = t(c)
    pixels.append(np.asarray(c).transpose(2, 0, 1).reshape(-1).tolist())
    with torch.no_grad():
        p = F.softmax(model(transform(img)[None]), 1)[0]
    entropy.append(float(-(p * p.clamp_min(1e-30).log()).sum()))

# Pillow's resize alone, each filter, shrinking, enlarging and both at once, either pass
# first (97x80 to 71x71 and to 90x90 go vertically first in Pillow 13), on the photos:
# an FNV-1a 64 hash of the 8-bit result in (c, h, w) order (alkit's data fingerprint).
def fnv1a(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h

filters = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
resamples = []
for name in names:
    img = Image.open(os.path.join(photos, name)).convert("RGB")
    for fname, f in filters.items():
        for side in (23, 71, 90, 150):
            r = np.asarray(img.resize((side, side), f)).transpose(2, 0, 1)
            resamples.append({"id": name, "filter": fname, "side": side,
                              "fnv1a": str(fnv1a(r.tobytes()))})

model64 = model.double()
with torch.no_grad():
    for name, t in model64.state_dict().items():
        if not name.endswith("num_batches_tracked"):
            t.copy_(formula(name, list(t.shape)))
x = torch.tensor(pixels, dtype=torch.float64).reshape(3, 3, 64, 64) / 255.0
x = (x - torch.tensor(mean, dtype=torch.float64)[:, None, None]) / torch.tensor(std, dtype=torch.float64)[:, None, None]
with torch.no_grad():
    logits = model64(x)
names_p = [n for n, _ in model64.named_parameters()]
layers = []
for n in names_p:
    p = n.rsplit(".", 1)[0]
    if p not in layers:
        layers.append(p)
params = list(model64.parameters())
sq = []
for i in range(3):
    lp = F.log_softmax(model64(x[i:i + 1]), 1)[0]
    rows = []
    for c in range(classes):
        g = torch.autograd.grad(lp[c], params, retain_graph=True)
        per = [0.0] * len(layers)
        for n, gi in zip(names_p, g):
            per[layers.index(n.rsplit(".", 1)[0])] += gi.square().sum().item()
        rows.append(per)
    sq.append(rows)
json.dump({"torch": torch.__version__, "timm": timm.__version__, "pillow": PIL.__version__, "data_config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
           "ids": names, "pixels": pixels, "logits": logits.tolist(), "sq": sq,
           "layers": layers, "entropy": entropy, "resamples": resamples},
          open(os.path.join(here, "timm_reference.json"), "w"))
print(cfg, "entropy", [round(e, 5) for e in entropy])
