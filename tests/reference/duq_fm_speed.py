# The DUQ reference Fashion-MNIST training step (y0ast/deterministic-uncertainty-quantification,
# train_duq_fm.py + utils/cnn_duq.py) timed on random batches of 128: images/s per lambda.
# Not part of the test suite: the PyTorch baseline for `alkit bench --train duq-fm`.
# Usage: python duq_fm_speed.py LAMBDA [THREADS]
import sys, time, torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
from duq_fm_model import Model
lam = float(sys.argv[1])
model = Model(); opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
x_all = torch.randn(128 * 20, 1, 28, 28); y_all = F.one_hot(torch.randint(0, 10, (128 * 20,)), 10).float()
def step(x, y):
    model.train(); opt.zero_grad()
    if lam > 0: x.requires_grad_(True)
    z, yp = model(x)
    loss = F.binary_cross_entropy(yp, y)
    if lam > 0:
        g = torch.autograd.grad(yp, x, torch.ones_like(yp), create_graph=True)[0].flatten(1)
        loss = loss + lam * ((g.norm(2, dim=1) - 1) ** 2).mean()
    loss.backward(); opt.step(); x.requires_grad_(False)
    with torch.no_grad():
        model.eval(); model.update_embeddings(x, y)
for i in range(5): step(x_all[:128].clone(), y_all[:128])
rates = []
for r in range(3):
    t = time.perf_counter()
    for i in range(10): step(x_all[128 * i:128 * (i + 1)].clone(), y_all[128 * i:128 * (i + 1)])
    rates.append(1280 / (time.perf_counter() - t))
rates.sort(); print(f"pytorch {torch.__version__} lambda {lam} threads {torch.get_num_threads()}: median {rates[1]:.0f} images/s (runs {[round(r) for r in rates]})")
