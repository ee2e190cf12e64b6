import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _quiet_insecure():
    from hemlp.fhe import InsecureParametersWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureParametersWarning)
        yield


class Square(torch.nn.Module):
    def forward(self, x):
        return x * x


def mlp(act=None, dims=(784, 128, 64, 10), seed=0):
    torch.manual_seed(seed)
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(act() if act is not None else Square())
    return torch.nn.Sequential(*layers).eval()


class SmallCNN(torch.nn.Module):
    """conv -> act -> avgpool -> conv -> act -> FC (with a BatchNorm to fold)."""

    def __init__(self, act=Square, c=(1, 3, 4), hw=8):
        super().__init__()
        torch.manual_seed(1)
        self.conv1 = torch.nn.Conv2d(c[0], c[1], 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(c[1])
        self.act1 = act()
        self.pool = torch.nn.AvgPool2d(2)
        self.conv2 = torch.nn.Conv2d(c[1], c[2], 3, stride=2, padding=1)
        self.act2 = act()
        self.fc = torch.nn.Linear(c[2] * (hw // 4) ** 2, 10)
        with torch.no_grad():
            self.bn1.running_mean.uniform_(-0.2, 0.2)
            self.bn1.running_var.uniform_(0.5, 2.0)
        self.eval()

    def forward(self, x):
        x = self.pool(self.act1(self.bn1(self.conv1(x))))
        x = self.act2(self.conv2(x))
        return self.fc(torch.flatten(x, 1))


def to_onnx(model, x, path):
    torch.onnx.export(model, torch.as_tensor(x[:1], dtype=torch.float32), str(path), dynamo=False,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return str(path)


def onnx_model(model, x):
    """The model exported to ONNX in memory (torch's legacy exporter, one sample), loaded: an onnx.ModelProto."""
    import io

    import onnx

    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, torch.tensor(x[:1], dtype=torch.float32), f, dynamo=False)
    return onnx.load_from_string(f.getvalue())


def torch_out(model, x):
    with torch.no_grad():
        return model(torch.as_tensor(x, dtype=torch.float32)).double().numpy()


def encrypted_vs_simulate(cm, x):
    sk, ek = cm.keygen()
    y = cm.decrypt(cm.run(cm.encrypt(x, sk), ek), sk)
    return y, cm.simulate(x)
