# The DUQ reference two-moons recipe (y0ast/deterministic-uncertainty-quantification,
# two_moons.ipynb) in PyTorch, with alkit's evaluation protocol: 1,000 training points,
# noise 0.1, auroc_far = AUROC of 1,000 held-out moons vs 1,000 annulus points (r 2..4).
# Not part of the test suite: an independent reference for the two-moons table of
# docs/reproductions.md.
# Usage: python duq_two_moons.py N_TRAIN SEED_FROM SEED_TO   (that table: 1000 0 200; torch 2.15)
import math, sys, torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(1)
def make_moons(n, noise, g):
    n_out = n // 2; n_in = n - n_out
    t_out = torch.linspace(0, math.pi, n_out, dtype=torch.float64)
    t_in = torch.linspace(0, math.pi, n_in, dtype=torch.float64)
    x = torch.cat([torch.stack([torch.cos(t_out), torch.sin(t_out)], 1),
                   torch.stack([1 - torch.cos(t_in), 1 - torch.sin(t_in) - 0.5], 1)])
    y = torch.cat([torch.zeros(n_out), torch.ones(n_in)]).long()
    p = torch.randperm(n, generator=g)
    x = x[p] + noise * torch.randn(n, 2, generator=g, dtype=torch.float64)
    return x.float(), y[p]
class Model(nn.Module):
    def __init__(s, features=20, num_embeddings=2, embedding_size=10):
        super().__init__()
        s.gamma, s.sigma = 0.99, 0.3
        s.fc1 = nn.Linear(2, features); s.fc2 = nn.Linear(features, features); s.fc3 = nn.Linear(features, features)
        s.W = nn.Parameter(torch.normal(torch.zeros(embedding_size, num_embeddings, features), 1))
        s.register_buffer('N', torch.ones(num_embeddings) * 20)
        s.register_buffer('m', torch.normal(torch.zeros(embedding_size, num_embeddings), 1))
        s.m = s.m * s.N.unsqueeze(0)
    def embed(s, x):
        x = F.relu(s.fc1(x)); x = F.relu(s.fc2(x)); x = F.relu(s.fc3(x))
        return torch.einsum('ij,mnj->imn', x, s.W)
    def bilinear(s, z):
        e = s.m / s.N.unsqueeze(0)
        return (-(z - e.unsqueeze(0)) ** 2).mean(1).div(2 * s.sigma ** 2).exp()
    def forward(s, x):
        z = s.embed(x); return z, s.bilinear(z)
    def update_embeddings(s, x, y):
        z = s.embed(x)
        s.N = torch.max(s.gamma * s.N + (1 - s.gamma) * y.sum(0), torch.ones_like(s.N))
        s.m = s.gamma * s.m + (1 - s.gamma) * torch.einsum('ijk,ik->jk', z, y)
def auroc(neg, pos):
    s = torch.cat([neg, pos]); r = torch.empty_like(s); r[s.argsort()] = torch.arange(1, len(s) + 1, dtype=s.dtype)
    return ((r[len(neg):].sum() - len(pos) * (len(pos) + 1) / 2) / (len(neg) * len(pos))).item()
def run(seed, n_train):
    torch.manual_seed(seed); g = torch.Generator().manual_seed(seed)
    xtr, ytr = make_moons(n_train, 0.1, g); xte, yte = make_moons(1000, 0.1, g)
    c = xtr.mean(0)
    r = torch.sqrt(4 + 12 * torch.rand(1000, generator=g)); th = 2 * math.pi * torch.rand(1000, generator=g)
    far = torch.stack([c[0] + r * torch.cos(th), c[1] + r * torch.sin(th)], 1)
    model = Model(); opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xtr, F.one_hot(ytr).float()), batch_size=64, shuffle=True, drop_last=True)
    for _ in range(30):
        for x, y in dl:
            model.train(); opt.zero_grad(); x.requires_grad_(True)
            z, yp = model(x)
            loss = F.binary_cross_entropy(yp, y)
            gr = torch.autograd.grad(yp, x, torch.ones_like(yp), create_graph=True)[0].flatten(1)
            loss = loss + 1.0 * ((gr.norm(2, dim=1) - 1) ** 2).mean()
            loss.backward(); opt.step()
            with torch.no_grad(): model.update_embeddings(x, y)
    with torch.no_grad():
        kin = model(xte)[1]; kfar = model(far)[1]
    acc = (kin.argmax(1) == yte).float().mean().item()
    return acc, auroc(1 - kin.max(1)[0], 1 - kfar.max(1)[0])
n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
for seed in range(int(sys.argv[2]), int(sys.argv[3])):
    acc, a = run(seed, n); print(f"seed {seed} n_train {n}: accuracy {acc:.4f} auroc_far {a:.4f}", flush=True)
