"""A small VGG for CIFAR-10 in the style of kuangliu/pytorch-cifar (models/vgg.py; Simonyan & Zisserman 2015):
the feature extractor built from a cfg list, Conv-BN-ReLU per number, a pooling layer per letter, and the
repository's trailing ``nn.AvgPool2d(kernel_size=1, stride=1)`` (a no-op it has always carried). The classifier
is torchvision's VGG head, narrowed: Dropout → Linear → ReLU → Dropout → Linear.

'A' is 2x2 average pooling where VGG has max pooling ('M'), the substitution HE-friendly VGGs make. The flatten
size is fixed by the three poolings of a 32x32 input, so inputs must be 32x32; ``width_mult`` scales every layer's
channels (0.25 gives a narrow copy for fast tests).
"""
import torch.nn as nn

__all__ = ["VGG", "cfg", "vgg_small"]

cfg = {
    'VGGSmall': [32, 32, 'A', 64, 64, 'A', 128, 'A'],
}


class VGG(nn.Module):
    def __init__(self, vgg_name, num_classes=10, width_mult=1.0):
        super(VGG, self).__init__()
        self.width_mult = width_mult
        self.features = self._make_layers(cfg[vgg_name])
        last = self.in_channels
        self.classifier = nn.Sequential(
            nn.Dropout(),
            nn.Linear(last * 4 * 4, 2 * last),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(2 * last, num_classes),
        )

    def forward(self, x):
        x = self.features(x)
        x = x.view(x.size(0), -1)
        x = self.classifier(x)
        return x

    def _make_layers(self, cfg):
        layers = []
        in_channels = 3
        for x in cfg:
            if x == 'A':
                layers += [nn.AvgPool2d(2)]
            else:
                x = max(1, int(x * self.width_mult))
                layers += [nn.Conv2d(in_channels, x, kernel_size=3, padding=1),
                           nn.BatchNorm2d(x),
                           nn.ReLU(inplace=True)]
                in_channels = x
        layers += [nn.AvgPool2d(kernel_size=1, stride=1)]
        self.in_channels = in_channels
        return nn.Sequential(*layers)


def vgg_small(num_classes=10, width_mult=1.0):
    return VGG('VGGSmall', num_classes, width_mult)
