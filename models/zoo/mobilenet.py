"""MobileNet v1 and v2 for 32x32 CIFAR-10, small configurations.

- ``MobileNetV1`` (Howard et al. 2017), written as the common PyTorch ports write it (marvis/pytorch-mobilenet):
  ``conv_bn`` / ``conv_dw`` helpers returning ``nn.Sequential``; a depthwise-separable block is a 3x3 depthwise conv
  (``groups=inp``) + BN + ReLU6 then a 1x1 pointwise conv + BN + ReLU6. ReLU6 (``nn.ReLU6(inplace=True)``) as in the
  paper's TensorFlow reference; the ports often use ReLU. Head: ``F.adaptive_avg_pool2d(x, 1)``,
  ``torch.flatten(x, 1)``.
- ``MobileNetV2`` (Sandler et al. 2018), kuangliu/pytorch-cifar style (models/mobilenetv2.py): an inverted-residual
  ``Block`` (1x1 expand → 3x3 depthwise → 1x1 linear projection) whose residual is added only at stride 1
  (``out = out + self.shortcut(x) if self.stride == 1 else out``, with a 1x1 conv + BN shortcut when the width
  changes), a stride-1 stem for 32x32 inputs, ``F.relu6`` as in the paper, and a ``out.mean((2, 3))`` head.

Both end in global average pooling, so they also run on smaller inputs (8x8 for the tests).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["Block", "MobileNetV1", "MobileNetV2", "mobilenet_v1", "mobilenet_v2"]


def conv_bn(inp, oup, stride):
    return nn.Sequential(
        nn.Conv2d(inp, oup, 3, stride, 1, bias=False),
        nn.BatchNorm2d(oup),
        nn.ReLU6(inplace=True)
    )


def conv_dw(inp, oup, stride):
    return nn.Sequential(
        nn.Conv2d(inp, inp, 3, stride, 1, groups=inp, bias=False),
        nn.BatchNorm2d(inp),
        nn.ReLU6(inplace=True),

        nn.Conv2d(inp, oup, 1, 1, 0, bias=False),
        nn.BatchNorm2d(oup),
        nn.ReLU6(inplace=True),
    )


class MobileNetV1(nn.Module):
    # (out_planes, stride) per depthwise-separable block: the paper's 32-64-128-256 opening, stride 1 at the stem
    # because CIFAR images are 32x32, not 224x224
    cfg = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1)]

    def __init__(self, num_classes=10):
        super(MobileNetV1, self).__init__()
        layers = [conv_bn(3, 32, 1)]
        in_planes = 32
        for out_planes, stride in self.cfg:
            layers.append(conv_dw(in_planes, out_planes, stride))
            in_planes = out_planes
        self.model = nn.Sequential(*layers)
        self.fc = nn.Linear(in_planes, num_classes)

    def forward(self, x):
        x = self.model(x)
        x = F.adaptive_avg_pool2d(x, 1)
        x = torch.flatten(x, 1)
        x = self.fc(x)
        return x


class Block(nn.Module):
    '''expand + depthwise + pointwise'''
    def __init__(self, in_planes, out_planes, expansion, stride):
        super(Block, self).__init__()
        self.stride = stride

        planes = expansion * in_planes
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=1, stride=1, padding=0, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=1, groups=planes, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_planes, kernel_size=1, stride=1, padding=0, bias=False)
        self.bn3 = nn.BatchNorm2d(out_planes)

        self.shortcut = nn.Sequential()
        if stride == 1 and in_planes != out_planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=1, padding=0, bias=False),
                nn.BatchNorm2d(out_planes),
            )

    def forward(self, x):
        out = F.relu6(self.bn1(self.conv1(x)))
        out = F.relu6(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))          # linear bottleneck: no activation after the projection
        out = out + self.shortcut(x) if self.stride == 1 else out
        return out


class MobileNetV2(nn.Module):
    # (expansion, out_planes, num_blocks, stride): the paper's first four rows, fewer blocks; stride 1 in the
    # first strided row for CIFAR (as kuangliu's)
    cfg = [(1, 16, 1, 1),
           (6, 24, 2, 1),
           (6, 32, 2, 2),
           (6, 64, 2, 2)]

    def __init__(self, num_classes=10):
        super(MobileNetV2, self).__init__()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.layers = self._make_layers(in_planes=32)
        self.conv2 = nn.Conv2d(64, 256, kernel_size=1, stride=1, padding=0, bias=False)
        self.bn2 = nn.BatchNorm2d(256)
        self.linear = nn.Linear(256, num_classes)

    def _make_layers(self, in_planes):
        layers = []
        for expansion, out_planes, num_blocks, stride in self.cfg:
            strides = [stride] + [1]*(num_blocks-1)
            for stride in strides:
                layers.append(Block(in_planes, out_planes, expansion, stride))
                in_planes = out_planes
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu6(self.bn1(self.conv1(x)))
        out = self.layers(out)
        out = F.relu6(self.bn2(self.conv2(out)))
        out = out.mean((2, 3))
        out = self.linear(out)
        return out


def mobilenet_v1(num_classes=10):
    return MobileNetV1(num_classes)


def mobilenet_v2(num_classes=10):
    return MobileNetV2(num_classes)
