# Writes tests/fixtures/pytorch/: small files as PyTorch itself saves them, for
# `checkpoint::pytorch_files_read_as_their_safetensors` and the hostile-input table.
#
# One state dict of alkit's MLP shape (`fc1` 6->5, `fc2` 5->3, f32) is saved as
# - state_dict.pth: torch.save's zip archive (the default since PyTorch 1.6);
# - legacy.pth: the older sequential format (`_use_new_zipfile_serialization=False`);
# - checkpoint.pth: a training checkpoint `{"epoch", "state_dict", "optimizer", "args"}` (the
#   optimiser's tensors in their own storages, an argparse Namespace beside them);
# - model_key.pth: `{"model": state_dict, "epoch": 3}`;
# - parameters.pth: the state dict with `keep_vars=True` (`nn.Parameter`s);
# - whole_model.pth: `torch.save(model)`, which needs the model's Python class: refused;
# - dtypes.pth: the same values in f16 (`fc1.weight`), bf16 (`fc1.bias`), f64 (`fc2.weight`)
#   and f32 (`fc2.bias`), plus an int64 counter;
# - views.pth: `fc2.weight` a transposed (non-contiguous) view of a (5, 3) tensor,
#   `fc1.bias` a slice at an offset into a larger storage, `fc2.bias` sharing `fc1.bias`'s
#   storage;
# and model.safetensors: every one of those tensors (by the file it checks, `FILE/NAME`) in
# safetensors, for exact comparison. Total a few KB.
#
# Usage: python tests/reference/pytorch_checkpoints.py  (torch, safetensors)
import argparse, os
import torch, torch.nn as nn
from safetensors.torch import save_file

here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "..", "fixtures", "pytorch")
os.makedirs(out, exist_ok=True)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 5)
        self.fc2 = nn.Linear(5, 3)


torch.manual_seed(0)
model = Mlp()
sd = model.state_dict()
expected = {}


def save(name, obj, **kw):
    torch.save(obj, os.path.join(out, name), **kw)


def record(name, tensors):
    for k, v in tensors.items():
        expected[f"{name}/{k}"] = v.detach().clone().contiguous()


save("state_dict.pth", sd)
record("state_dict.pth", sd)
save("legacy.pth", sd, _use_new_zipfile_serialization=False)
record("legacy.pth", sd)
opt = torch.optim.Adam(model.parameters())
model.fc1.weight.sum().backward()
opt.step()
sd = model.state_dict()
save("checkpoint.pth", {"epoch": 7, "state_dict": sd, "optimizer": opt.state_dict(),
                        "args": argparse.Namespace(lr=0.1, arch="mlp")})
record("checkpoint.pth", sd)
save("model_key.pth", {"model": sd, "epoch": 3})
record("model_key.pth", sd)
save("parameters.pth", model.state_dict(keep_vars=True))
record("parameters.pth", sd)
save("whole_model.pth", model)
dt = {"fc1.weight": sd["fc1.weight"].half(), "fc1.bias": sd["fc1.bias"].bfloat16(),
      "fc2.weight": sd["fc2.weight"].double(), "fc2.bias": sd["fc2.bias"].clone(),
      "counter": torch.tensor(12345678901, dtype=torch.int64)}
save("dtypes.pth", dt)
record("dtypes.pth", dt)
big = torch.arange(20, dtype=torch.float32) / 7
views = {"fc1.weight": sd["fc1.weight"].clone(), "fc1.bias": big[3:8],
         "fc2.weight": (torch.arange(15, dtype=torch.float32).reshape(5, 3) / 3).t(),
         "fc2.bias": big[10:13]}
assert not views["fc2.weight"].is_contiguous()
save("views.pth", views)
record("views.pth", views)
save_file(expected, os.path.join(out, "model.safetensors"))
for f in sorted(os.listdir(out)):
    print(f, os.path.getsize(os.path.join(out, f)))
