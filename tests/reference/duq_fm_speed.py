# The DUQ reference Fashion-MNIST training step (y0ast/deterministic-uncertainty-quantification,
# train_duq_fm.py + utils/cnn_duq.py) timed on random batches of 128: images/s per lambda.
# Not part of the test suite: the PyTorch baseline for `alkit bench --train duq-fm`.
# Usage: python duq_fm_speed.py LAMBDA [THREADS]
import sys, time, torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
class Model(nn.Module):
    def __init__(s):
        super().__init__()
        s.conv1 = nn.Conv2d(1, 64, 3, padding=1); s.bn1 = nn.BatchNorm2d(64)
        s.conv2 = nn.Conv2d(64, 128, 3, padding=1); s.bn2 = nn.BatchNorm2d(128)
        s.conv3 = nn.Conv2d(128, 128, 3); s.bn3 = nn.BatchNorm2d(128)
        s.fc1 = nn.Linear(2 * 2 * 128, 256)
        s.W = nn.Parameter(torch.normal(torch.zeros(256, 10, 256), 0.05))
        s.register_buffer("N", torch.ones(10) * 12)
        s.register_buffer("m", torch.normal(torch.zeros(256, 10), 1))
        s.m = s.m * s.N; s.sigma = 0.1; s.gamma = 0.999
    def embed(s, x):
        x = F.max_pool2d(F.relu(s.bn1(s.conv1(x))), 2)
        x = F.max_pool2d(F.relu(s.bn2(s.conv2(x))), 2)
        x = F.max_pool2d(F.relu(s.bn3(s.conv3(x))), 2)
        x = F.relu(s.fc1(x.flatten(1)))
        return torch.einsum("ij,mnj->imn", x, s.W)
    def bilinear(s, z):
        e = s.m / s.N.unsqueeze(0)
        return (-(z - e.unsqueeze(0)) ** 2).mean(1).div(2 * s.sigma ** 2).exp()
    def forward(s, x):
        z = s.embed(x); return z, s.bilinear(z)
    def update_embeddings(s, x, y):
        z = s.embed(x)
        s.N = s.gamma * s.N + (1 - s.gamma) * y.sum(0)
        s.m = s.gamma * s.m + (1 - s.gamma) * torch.einsum("ijk,ik->jk", z, y)
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
