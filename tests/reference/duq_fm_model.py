# The DUQ reference Fashion-MNIST model (y0ast/deterministic-uncertainty-quantification,
# utils/cnn_duq.py), written out so the reference scripts need only torch: duq_fm_speed.py
# and gpu_bench.py time it.
import torch
import torch.nn as nn
import torch.nn.functional as F

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
