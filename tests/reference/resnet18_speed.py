# The PyTorch CPU reference for `alkit bench --model resnet18`: ResNet-18 with the CIFAR stem
# (3x3 stride-1 first convolution, no max-pool; torchvision's block structure and names), 10
# classes, eval mode, on random 3x32x32 inputs, timed the ways PyTorch users compute it.
# Not part of the test suite. Prints one JSON line of images/s:
#   entropy     - batched inference under torch.no_grad, batch 256
#   regrad      - per-sample autograd: one forward per image, one backward per class, the
#                 squared norm of every parameter's gradient (REGrad's evidence)
#   regrad-vmap - torch.func: vmap over the batch of grad of log p_c, one class at a time
#   regrad-star - REGrad* with N = 8: per image, one forward of its 9 copies (8 perturbed by
#                 Gaussian noise, sigma 0.1) and one backward per class of the mean log p_c
# Usage: python resnet18_speed.py [THREADS] [N_ENTROPY] [N_GRAD]
import json, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
from resnet18_model import resnet18_cifar

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
n_ent = int(sys.argv[2]) if len(sys.argv) > 2 else 512
n_grad = int(sys.argv[3]) if len(sys.argv) > 3 else 16
torch.set_num_threads(threads)
torch.manual_seed(0)
model = resnet18_cifar(3, 10).eval()
x = torch.randn(max(n_ent, n_grad), 3, 32, 32)

def rate(n, f):
    f(min(n, 8))  # warm-up
    t = time.perf_counter(); f(n); return n / (time.perf_counter() - t)

def entropy(n):
    with torch.no_grad():
        for i in range(0, n, 256):
            p = F.softmax(model(x[i:i + 256]), 1)
            (-(p * p.clamp_min(1e-12).log()).sum(1)).tolist()

params = [p for p in model.parameters()]
def regrad_loop(n):
    for i in range(n):
        lp = F.log_softmax(model(x[i:i + 1]), 1)[0]
        for c in range(10):
            g = torch.autograd.grad(lp[c], params, retain_graph=c < 9)
            [gi.square().sum().item() for gi in g]

def regrad_star(n, copies=9, sigma=0.1):
    for i in range(n):
        xb = x[i:i + 1].repeat(copies, 1, 1, 1)
        xb[1:] += sigma * torch.randn_like(xb[1:])
        lp = F.log_softmax(model(xb), 1)
        for c in range(10):
            g = torch.autograd.grad(lp[:, c].mean(), params, retain_graph=c < 9)
            [gi.square().sum().item() for gi in g]

from torch.func import functional_call, grad, vmap
named = {k: v.detach() for k, v in model.named_parameters()}
buffers = {k: v for k, v in model.named_buffers()}
def logp(p, xi, c):
    out = functional_call(model, (p, buffers), (xi.unsqueeze(0),))
    return F.log_softmax(out, 1)[0, c]
def regrad_vmap(n, chunk=16):
    for i in range(0, n, chunk):
        xb = x[i:i + chunk]
        for c in range(10):
            g = vmap(grad(logp), in_dims=(None, 0, None))(named, xb, c)
            [v.square().flatten(1).sum(1) for v in g.values()]

out = {"threads": threads, "torch": torch.__version__,
       "entropy": round(rate(n_ent, entropy), 1),
       "regrad": round(rate(n_grad, regrad_loop), 2),
       "regrad-vmap": round(rate(n_grad, regrad_vmap), 2),
       "regrad-star": round(rate(max(n_grad // 4, 2), regrad_star), 2)}
print(json.dumps(out))
