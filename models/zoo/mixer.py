"""A tiny MLP-Mixer (Tolstikhin et al. 2021) for 32x32 CIFAR-10, written as timm / lucidrains' mlp-mixer-pytorch
write it: the patch embedding is a Conv2d with kernel = stride = patch, ``x.flatten(2).transpose(1, 2)`` turns the
(B, D, H/p, W/p) map into (B, T, D) tokens, each block mixes tokens (an MLP over T, applied to the transposed
tensor) then channels (an MLP over D), both pre-norm and residual, with GELU; the head averages the tokens
(``x.mean(dim=1)``).

Size: dim 16, 2 blocks, patch 4 (64 tokens), token-MLP hidden 32, channel-MLP hidden 64. The token MLP's width is
the token count, so inputs must be 32x32.

``norm`` defaults to ``nn.LayerNorm`` as in the paper. LayerNorm divides by a data-dependent standard deviation, which
is not a polynomial; for hemlp build it with ``norm=nn.Identity`` (the ``mixer_nonorm`` zoo entry). BatchNorm does not
drop in here: ``nn.BatchNorm1d(dim)`` on (B, T, D) tokens would normalise over T, not D.
"""
import torch.nn as nn

__all__ = ["MixerBlock", "MlpBlock", "MlpMixer", "mixer_tiny"]


class MlpBlock(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class MixerBlock(nn.Module):
    def __init__(self, num_tokens, dim, tokens_mlp_dim, channels_mlp_dim, norm=nn.LayerNorm):
        super().__init__()
        self.norm1 = norm(dim)
        self.mlp_tokens = MlpBlock(num_tokens, tokens_mlp_dim)
        self.norm2 = norm(dim)
        self.mlp_channels = MlpBlock(dim, channels_mlp_dim)

    def forward(self, x):
        # token mixing: the Linear layers act on the last axis, so swap T to the end and back
        x = x + self.mlp_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        x = x + self.mlp_channels(self.norm2(x))
        return x


class MlpMixer(nn.Module):
    def __init__(self, num_classes=10, image_size=32, in_chans=3, patch_size=4, dim=16, depth=2,
                 tokens_mlp_dim=32, channels_mlp_dim=64, norm=nn.LayerNorm):
        super().__init__()
        num_tokens = (image_size // patch_size) ** 2
        self.stem = nn.Conv2d(in_chans, dim, kernel_size=patch_size, stride=patch_size)
        self.blocks = nn.Sequential(*[
            MixerBlock(num_tokens, dim, tokens_mlp_dim, channels_mlp_dim, norm=norm) for _ in range(depth)])
        self.norm = norm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.stem(x)                    # (B, D, H/p, W/p)
        x = x.flatten(2).transpose(1, 2)    # (B, T, D)
        x = self.blocks(x)
        x = self.norm(x)
        x = x.mean(dim=1)
        x = self.head(x)
        return x


def mixer_tiny(num_classes=10, norm=nn.LayerNorm):
    return MlpMixer(num_classes, norm=norm)
