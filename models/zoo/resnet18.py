"""ResNet-18 for 32x32 CIFAR-10 as in kuangliu/pytorch-cifar (models/resnet.py), after He et al. 2016.

torchvision's ImageNet ResNet-18 with the stem adapted to 32x32 inputs: a 3x3 stride-1 conv instead of the 7x7
stride-2 conv and max pooling; four stages of two BasicBlocks (64/128/256/512 channels, strides 1/2/2/2); a
1x1 conv + BN projection shortcut where the stride or width changes. The head is the repository's fixed
``F.avg_pool2d(out, 4)`` (the 4x4 map a 32x32 input leaves), so inputs must be 32x32.

``width`` scales every stage (64 is the published network; 8 gives a narrow copy for fast tests).
"""
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["BasicBlock", "ResNet", "ResNet18"]


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super(BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion*planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion*planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion*planes)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        out = F.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, num_blocks, num_classes=10, width=64):
        super(ResNet, self).__init__()
        self.in_planes = width

        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = self._make_layer(block, width, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, 2*width, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, 4*width, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(block, 8*width, num_blocks[3], stride=2)
        self.linear = nn.Linear(8*width*block.expansion, num_classes)

    def _make_layer(self, block, planes, num_blocks, stride):
        strides = [stride] + [1]*(num_blocks-1)
        layers = []
        for stride in strides:
            layers.append(block(self.in_planes, planes, stride))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = self.layer4(out)
        out = F.avg_pool2d(out, 4)
        out = out.view(out.size(0), -1)
        out = self.linear(out)
        return out


def ResNet18(num_classes=10, width=64):
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes, width)
