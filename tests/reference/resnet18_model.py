# ResNet-18/34/50 with torchvision's module names (conv1, bn1, layer1.0.conv1, ...,
# downsample.0/1, fc) and a choice of stem, written out so the reference scripts need only
# torch. The CIFAR stem is a 3x3 stride-1 convolution without max-pool.
import math
import torch
import torch.nn as nn

class BasicBlock(nn.Module):
    expansion = 1
    def __init__(s, inp, width, stride):
        super().__init__()
        s.conv1 = nn.Conv2d(inp, width, 3, stride, 1, bias=False); s.bn1 = nn.BatchNorm2d(width)
        s.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False); s.bn2 = nn.BatchNorm2d(width)
        s.relu = nn.ReLU()
        s.downsample = None
        if stride != 1 or inp != width:
            s.downsample = nn.Sequential(nn.Conv2d(inp, width, 1, stride, bias=False), nn.BatchNorm2d(width))
    def forward(s, x):
        h = s.relu(s.bn1(s.conv1(x)))
        h = s.bn2(s.conv2(h))
        return s.relu(h + (x if s.downsample is None else s.downsample(x)))

class Bottleneck(nn.Module):
    expansion = 4
    def __init__(s, inp, width, stride):
        super().__init__()
        out = width * 4
        s.conv1 = nn.Conv2d(inp, width, 1, bias=False); s.bn1 = nn.BatchNorm2d(width)
        s.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False); s.bn2 = nn.BatchNorm2d(width)
        s.conv3 = nn.Conv2d(width, out, 1, bias=False); s.bn3 = nn.BatchNorm2d(out)
        s.relu = nn.ReLU()
        s.downsample = None
        if stride != 1 or inp != out:
            s.downsample = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))
    def forward(s, x):
        h = s.relu(s.bn1(s.conv1(x)))
        h = s.relu(s.bn2(s.conv2(h)))
        h = s.bn3(s.conv3(h))
        return s.relu(h + (x if s.downsample is None else s.downsample(x)))

class ResNet(nn.Module):
    def __init__(s, block, blocks, in_channels, classes, stem):
        super().__init__()
        if stem == "cifar":
            s.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False); s.maxpool = nn.Identity()
        else:
            s.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False); s.maxpool = nn.MaxPool2d(3, 2, 1)
        s.bn1 = nn.BatchNorm2d(64); s.relu = nn.ReLU()
        inp = 64
        for i, n in enumerate(blocks):
            layers = []
            for b in range(n):
                layers.append(block(inp, 64 << i, 2 if i > 0 and b == 0 else 1))
                inp = (64 << i) * block.expansion
            setattr(s, f"layer{i + 1}", nn.Sequential(*layers))
        s.avgpool = nn.AdaptiveAvgPool2d(1); s.fc = nn.Linear(inp, classes)
    def forward(s, x):
        x = s.maxpool(s.relu(s.bn1(s.conv1(x))))
        for i in range(1, 5):
            x = getattr(s, f"layer{i}")(x)
        return s.fc(s.avgpool(x).flatten(1))

def resnet18_cifar(in_channels, classes):
    return ResNet(BasicBlock, [2, 2, 2, 2], in_channels, classes, "cifar")

def resnet(depth, in_channels, classes, stem):
    block, blocks = {18: (BasicBlock, [2, 2, 2, 2]), 34: (BasicBlock, [3, 4, 6, 3]),
                     50: (Bottleneck, [3, 4, 6, 3])}[depth]
    return ResNet(block, blocks, in_channels, classes, stem)


# The weight formula the Rust tests compute too (`formula_tensor`), so no weight file ships:
# every tensor from sin(0.37 i + 0.11 len(name)), shaped by its role.
def formula(name, shape):
    n = math.prod(shape)
    i = torch.arange(n, dtype=torch.float64)
    s = torch.sin(0.37 * i + 0.11 * len(name))
    last = name.rsplit(".", 1)[-1]
    if last == "running_mean":
        v = 0.1 * s
    elif last == "running_var":
        v = 1.0 + 0.5 * s * s
    elif "bn" in name or "downsample.1" in name:
        v = 1.0 + 0.2 * s if last == "weight" else 0.1 * s
    else:
        fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
        v = math.sqrt(3.0 / fan_in) * s
    return v.reshape(shape)
