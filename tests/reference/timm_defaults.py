# Writes timm_defaults.json: what timm itself makes of a repository's `config.json` when
# `pretrained_cfg`, or some of its keys, is missing, for `timm::timm_defaults_are_timms_own`.
#
# Each case is a `config.json` (timm's resnet18, resnet34 and resnet50; no `pretrained_cfg`
# at all, an empty one, the older single-dict layout with the keys at the top, each
# preprocessing key left out of a full one in turn, the test-size keys beside them). For each,
# the model is created the two ways timm reads a repository, `create_model("hf-hub:...")`
# (through an offline hub cache) and `create_model("local-dir:...")`, and the script records
# `resolve_data_config({}, model=model)` (asserting both ways agree) and, per photo of
# tests/fixtures/timm_photos, an FNV-1a 64 hash of the 8-bit image after the transform's PIL
# steps (resize and crop), in (c, h, w) order. Beside them, for the record, what timm's
# registry gives a model created by name (`create_model("resnet18")`: its default tag's
# configuration), which a `config.json` never reaches.
#
# Usage: python tests/reference/timm_defaults.py  (torch, timm==1.0.31, pillow, numpy)
import json, os, shutil, sys, tempfile

cache = tempfile.mkdtemp()
os.environ["HF_HUB_CACHE"] = cache
os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import timm, torch, PIL
from PIL import Image

here = os.path.dirname(os.path.abspath(__file__))
photos = os.path.join(here, "..", "fixtures", "timm_photos")
names = ["a.png", "b.png", "c.png"]


def fnv1a(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def crops(cfg):
    transform = timm.data.create_transform(**cfg)
    out = []
    for name in names:
        img = Image.open(os.path.join(photos, name)).convert("RGB")
        for t in transform.transforms:
            y = t(img)
            if not isinstance(y, Image.Image):
                break
            img = y
        out.append(str(fnv1a(np.asarray(img).transpose(2, 0, 1).tobytes())))
    return out


def plain(cfg):
    return {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}


full = {"input_size": [3, 96, 96], "interpolation": "bilinear", "crop_pct": 0.8,
        "crop_mode": "squash", "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3]}
cases = []
for arch in ["resnet18", "resnet34", "resnet50"]:
    cases.append((f"{arch}-no-pretrained-cfg", {"architecture": arch, "num_classes": 5}))
cases += [
    ("resnet18-empty-pretrained-cfg", {"architecture": "resnet18", "num_classes": 5, "pretrained_cfg": {}}),
    ("resnet18-single-dict", dict({"architecture": "resnet18", "num_classes": 5}, **full)),
    ("resnet18-full", {"architecture": "resnet18", "num_classes": 5, "pretrained_cfg": dict(full)}),
    ("resnet18-test-size-keys", {"architecture": "resnet18", "num_classes": 5, "pretrained_cfg": dict(
        full, test_input_size=[3, 128, 128], test_crop_pct=1.0)}),
    ("resnet18-null-keys", {"architecture": "resnet18", "num_classes": 5, "pretrained_cfg": {
        "input_size": [3, 96, 96], "interpolation": None, "crop_pct": None, "crop_mode": None,
        "mean": None, "std": None}}),
]
for key in full:
    pc = {k: v for k, v in full.items() if k != key}
    cases.append((f"resnet18-without-{key}", {"architecture": "resnet18", "num_classes": 5, "pretrained_cfg": pc}))
for arch in ["resnet34", "resnet50"]:
    pc = {k: v for k, v in full.items() if k not in ("crop_pct", "interpolation")}
    cases.append((f"{arch}-without-crop-pct-and-interpolation",
                  {"architecture": arch, "num_classes": 5, "pretrained_cfg": pc}))

work = tempfile.mkdtemp()
records = []
for k, (name, config) in enumerate(cases):
    commit = f"{k:040x}"
    snap = os.path.join(cache, f"models--test--{name}", "snapshots", commit)
    os.makedirs(snap)
    os.makedirs(os.path.join(cache, f"models--test--{name}", "refs"))
    with open(os.path.join(cache, f"models--test--{name}", "refs", "main"), "w") as f:
        f.write(commit)
    with open(os.path.join(snap, "config.json"), "w") as f:
        json.dump(config, f)
    local = os.path.join(work, name)
    os.makedirs(local)
    shutil.copy(os.path.join(snap, "config.json"), local)
    got = []
    for source in [f"hf-hub:test/{name}", f"local-dir:{local}"]:
        model = timm.create_model(source, pretrained=False)
        got.append(plain(timm.data.resolve_data_config({}, model=model)))
        test_cfg = plain(timm.data.resolve_data_config({}, model=model, use_test_size=True))
    assert got[0] == got[1], (name, got)
    records.append({"name": name, "config": config, "data_config": got[0],
                    "test_size_data_config": test_cfg,
                    "num_classes": model.num_classes, "crops": crops(got[0])})
    print(name, got[0], model.num_classes)

registry = {}
for arch in ["resnet18", "resnet34", "resnet50"]:
    model = timm.create_model(arch, pretrained=False)
    registry[arch] = {"tag": model.pretrained_cfg.get("tag"),
                      "data_config": plain(timm.data.resolve_data_config({}, model=model))}
    print(arch, registry[arch])

with open(os.path.join(here, "timm_defaults.json"), "w") as f:
    json.dump({"torch": torch.__version__, "timm": timm.__version__, "pillow": PIL.__version__,
               "photos": names, "cases": records, "created_by_name": registry}, f, indent=1)
shutil.rmtree(cache)
shutil.rmtree(work)
