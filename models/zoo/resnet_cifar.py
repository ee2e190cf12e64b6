"""CIFAR-10 ResNet-20/32/44 as in akamaster/pytorch_resnet_cifar10 (resnet.py), after He et al. 2016, section 4.2.

Three stages of 16/32/64 channels, 3n BasicBlocks, global average pooling and one linear layer. Option A (the paper's
CIFAR choice, and the repository's default) shortcuts a downsampling block by taking every other pixel and
zero-padding the missing channels, so it adds no parameters; option B uses a 1x1 conv + BN projection.

Written in the repository's style on purpose (this is a frontend regression model): the shortcut is a Python lambda
wrapped in ``LambdaLayer``, the residual add is in place (``out += ...``), and the head pools by
``out.size()[3]`` and flattens with ``out.view(out.size(0), -1)``.
"""
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init

__all__ = ["BasicBlock", "LambdaLayer", "ResNet", "resnet20", "resnet20_b", "resnet32", "resnet44"]


def _weights_init(m):
    if isinstance(m, nn.Linear) or isinstance(m, nn.Conv2d):
        init.kaiming_normal_(m.weight)


class LambdaLayer(nn.Module):
    def __init__(self, lambd):
        super(LambdaLayer, self).__init__()
        self.lambd = lambd

    def forward(self, x):
        return self.lambd(x)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1, option='A'):
        super(BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            if option == 'A':
                # parameter-free: halve H and W by slicing, pad planes//4 zero channels on each side (16->32->64)
                self.shortcut = LambdaLayer(lambda x:
                                            F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, planes//4, planes//4), "constant", 0))
            elif option == 'B':
                self.shortcut = nn.Sequential(
                    nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                    nn.BatchNorm2d(self.expansion * planes)
                )
            else:
                raise ValueError(f"option must be 'A' or 'B', not {option!r}")

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        out = F.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, num_blocks, num_classes=10, option='A'):
        super(ResNet, self).__init__()
        self.in_planes = 16
        self.option = option

        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = self._make_layer(block, 16, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, 32, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, 64, num_blocks[2], stride=2)
        self.linear = nn.Linear(64, num_classes)

        self.apply(_weights_init)

    def _make_layer(self, block, planes, num_blocks, stride):
        strides = [stride] + [1]*(num_blocks-1)
        layers = []
        for stride in strides:
            layers.append(block(self.in_planes, planes, stride, self.option))
            self.in_planes = planes * block.expansion

        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        # global average pooling written as a size-dependent kernel: whatever H (and W) the input had
        out = F.avg_pool2d(out, out.size()[3])
        out = out.view(out.size(0), -1)
        out = self.linear(out)
        return out


def resnet20(num_classes=10):
    return ResNet(BasicBlock, [3, 3, 3], num_classes)


def resnet32(num_classes=10):
    return ResNet(BasicBlock, [5, 5, 5], num_classes)


def resnet44(num_classes=10):
    return ResNet(BasicBlock, [7, 7, 7], num_classes)


def resnet20_b(num_classes=10):
    """ResNet-20 with projection (1x1 conv + BN) shortcuts where the shape changes."""
    return ResNet(BasicBlock, [3, 3, 3], num_classes, option='B')
