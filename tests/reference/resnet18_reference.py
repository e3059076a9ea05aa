# Writes resnet18_reference.json: logits and REGrad's evidence (per image, class and layer,
# the squared norm of d log p_c / d theta_layer) of a CIFAR-stem ResNet-18 in PyTorch, f64,
# eval mode, on weights and images given by a formula that the Rust test
# (`layer_library::resnet18_matches_pytorch_on_the_same_weights`) computes too, so no weight
# file is shipped. A layer is a module with parameters, in registration order (torchvision's).
# Usage: python resnet18_reference.py  (needs torch; run from tests/reference)
import json, math, torch, torch.nn.functional as F
from resnet18_model import formula, resnet18_cifar

torch.set_default_dtype(torch.float64)
model = resnet18_cifar(3, 10).eval()
with torch.no_grad():
    for name, t in model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            continue
        t.copy_(formula(name, list(t.shape)))
x = torch.sin(0.013 * torch.arange(2 * 3 * 32 * 32, dtype=torch.float64)).reshape(2, 3, 32, 32)
logits = model(x)
names = [n for n, _ in model.named_parameters()]
layers = []
for n in names:
    p = n.rsplit(".", 1)[0]
    if p not in layers:
        layers.append(p)
params = list(model.parameters())
sq = []
for i in range(2):
    lp = F.log_softmax(model(x[i:i + 1]), 1)[0]
    rows = []
    for c in range(10):
        g = torch.autograd.grad(lp[c], params, retain_graph=True)
        per = [0.0] * len(layers)
        for n, gi in zip(names, g):
            per[layers.index(n.rsplit(".", 1)[0])] += gi.square().sum().item()
        rows.append(per)
    sq.append(rows)
json.dump({"torch": torch.__version__, "layers": layers, "logits": logits.tolist(), "sq": sq},
          open("resnet18_reference.json", "w"))
print(len(layers), "layers; logits", [round(v, 4) for v in logits[0].tolist()])
