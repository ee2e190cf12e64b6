"""The one-ReLU model the agreement tests decide near a threshold with: its top-1 is class 0 when relu(x) > t."""


def relu_threshold_model(t: float):
    """torch's Sequential(Linear(1, 1), ReLU, Linear(1, 2)) computing [relu(x), t], in eval mode. torch is imported
    here: the callers skip without it (pytest.importorskip)."""
    import torch

    m = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.ReLU(), torch.nn.Linear(1, 2)).eval()
    with torch.no_grad():
        m[0].weight.fill_(1.0)
        m[0].bias.zero_()
        m[2].weight.copy_(torch.tensor([[1.0], [0.0]]))
        m[2].bias.copy_(torch.tensor([0.0, t]))
    return m
