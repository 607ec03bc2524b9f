"""trainbox's built-in models as PyTorch modules: the same layers under the same names, so
a trainbox safetensors export loads with load_state_dict(strict=True), and the Python
benchmark peers train exactly the same networks."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    """mlp: Flatten → [Linear → ReLU]* → Linear. hidden=(128,) is the classic example's Net."""

    def __init__(self, in_features=784, hidden=(128,), classes=10):
        super().__init__()
        sizes = [in_features, *hidden, classes]
        self.n = len(sizes) - 1
        for i in range(self.n):
            setattr(self, f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))

    def forward(self, x):
        x = torch.flatten(x, 1)
        for i in range(1, self.n):
            x = F.relu(getattr(self, f"fc{i}")(x))
        return getattr(self, f"fc{self.n}")(x)


class Cnn(nn.Module):
    """cnn: [Conv3x3 → ReLU → MaxPool2]* → fc1 → ReLU → fc2."""

    def __init__(self, in_shape=(1, 28, 28), channels=(32, 64), fc=128, classes=10):
        super().__init__()
        c, h, w = in_shape
        self.n = len(channels)
        for i, out in enumerate(channels):
            setattr(self, f"conv{i + 1}", nn.Conv2d(c, out, 3, padding=1))
            c, h, w = out, h // 2, w // 2
        self.fc1 = nn.Linear(c * h * w, fc)
        self.fc2 = nn.Linear(fc, classes)

    def forward(self, x):
        for i in range(1, self.n + 1):
            x = F.max_pool2d(F.relu(getattr(self, f"conv{i}")(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    """resnet: torchvision's BasicBlock layout with a 3x3 stem and no max-pool (small images)."""

    def __init__(self, in_channels=1, width=64, blocks=(2, 2, 2, 2), classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        c = width
        self.n = len(blocks)
        for s, nb in enumerate(blocks):
            out = width << s
            layers = []
            for b in range(nb):
                layers.append(BasicBlock(c, out, 2 if b == 0 and s > 0 else 1))
                c = out
            setattr(self, f"layer{s + 1}", nn.Sequential(*layers))
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        for s in range(1, self.n + 1):
            x = getattr(self, f"layer{s}")(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_model(cfg_model, in_shape=(1, 28, 28), classes=10):
    """From the [model] table of a trainbox config (a dict)."""
    name = cfg_model.get("name", "mlp")
    if name == "mlp":
        c, h, w = in_shape
        return Net(c * h * w, tuple(cfg_model.get("hidden", [128])), classes)
    if name == "cnn":
        return Cnn(in_shape, tuple(cfg_model.get("channels", [32, 64])), cfg_model.get("fc", 128), classes)
    if name == "resnet":
        return ResNet(in_shape[0], cfg_model.get("width", 64), tuple(cfg_model.get("blocks", [2, 2, 2, 2])), classes)
    raise ValueError(name)
