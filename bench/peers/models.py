"""trainbox's built-in models as PyTorch modules: the same layers under the same names, so
a trainbox safetensors export loads with load_state_dict(strict=True), and the Python
benchmark peers train exactly the same networks."""
import math

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


# --- gpt: nanoGPT's model (github.com/karpathy/nanoGPT, model.py), the twin of src/models/gpt.cpp ---
# Same module names (state_dict: transformer.wte.weight ... lm_head.weight, tied), exact GELU,
# SDPA with is_causal, LayerNorm eps 1e-5, GPT-2 init drawn in the same order, so one torch
# seed gives both the same weights on CPU. forward(idx) returns logits for every position.


class LayerNorm(nn.Module):
    """LayerNorm whose bias can be dropped alone (bias=False)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, dropout, bias):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)  # nanoGPT's; SDPA applies the dropout
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head, self.n_embd, self.dropout = n_head, n_embd, dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0,
                                           is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd, dropout, bias):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()  # exact (erf), as nanoGPT
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, dropout, bias):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout, bias)
        self.ln_2 = LayerNorm(n_embd, bias)
        self.mlp = MLP(n_embd, dropout, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """gpt: token + position embeddings, pre-LayerNorm blocks, ln_f, lm_head tied to wte."""

    def __init__(self, vocab_size, block_size=128, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=True):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, dropout, bias) for _ in range(n_layer)]),
            ln_f=LayerNorm(n_embd, bias),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        t = idx.size(1)
        assert t <= self.block_size, f"a sequence of {t} tokens is longer than block_size = {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def make_model(cfg_model, in_shape=(1, 28, 28), classes=10):
    """From the [model] table of a trainbox config (a dict). For gpt, `classes` is the dataset's
    vocabulary (model.vocab_size overrides it when > 0, as models::vocab_size_for) and in_shape
    is ignored."""
    name = cfg_model.get("name", "mlp")
    if name == "mlp":
        c, h, w = in_shape
        return Net(c * h * w, tuple(cfg_model.get("hidden", [128])), classes)
    if name == "cnn":
        return Cnn(in_shape, tuple(cfg_model.get("channels", [32, 64])), cfg_model.get("fc", 128), classes)
    if name == "resnet":
        return ResNet(in_shape[0], cfg_model.get("width", 64), tuple(cfg_model.get("blocks", [2, 2, 2, 2])), classes)
    if name == "gpt":
        vocab = cfg_model.get("vocab_size", 0) or classes
        return GPT(vocab, cfg_model.get("block_size", 128), cfg_model.get("n_layer", 4), cfg_model.get("n_head", 4),
                   cfg_model.get("n_embd", 128), cfg_model.get("dropout", 0.0), cfg_model.get("bias", True))
    raise ValueError(name)
