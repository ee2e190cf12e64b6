"""Seeded, deterministic CPU training (2 threads by default) with a tqdm progress bar."""
from __future__ import annotations

import random
import time

import numpy as np
import torch
from torch import nn


def set_determinism(seed: int, threads: int = 2) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    try:  # only settable before any inter-op parallel work started
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.use_deterministic_algorithms(True)


@torch.no_grad()
def predict(model: nn.Module, x: np.ndarray, batch_size: int = 512) -> np.ndarray:
    """Logits as a float64 numpy array."""
    model.eval()
    dev = next(model.parameters()).device
    out = [model(torch.as_tensor(x[i : i + batch_size]).to(dev)).double().cpu().numpy()
           for i in range(0, len(x), batch_size)]
    return np.concatenate(out) if out else np.zeros((0, 0))


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(predict(model, x).argmax(1) == y)) if len(y) else float("nan")


#: one-pixel shifts (right, left, down, up, two diagonals): small translations a digit keeps its label under
SHIFTS = ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, -1))


def shift_augment(x: np.ndarray, y: np.ndarray, shifts=SHIFTS):
    """(x, y) plus copies of the images shifted by each (dx, dy) pixel offset (NCHW, cyclic).

    With only 4 000 real training digits, the 784-128-64-10 x² MLP plateaus at ~96.3 % held-out
    accuracy; these 6 shifted copies lift it to ~97.6 % (10 epochs)."""
    xs, ys = [x], [y]
    for dx, dy in shifts:
        xs.append(np.roll(np.roll(x, dx, axis=-1), dy, axis=-2))
        ys.append(y)
    return np.ascontiguousarray(np.concatenate(xs)), np.concatenate(ys)


class RandomAffine:
    """A random small affine distortion of every image of a batch (NCHW tensor), drawn from the training's seeded
    generator: rotation within +-degrees, shear within +-shear, scale within 1 +- scale and a shift within +-shift
    pixels; bilinear resampling, zeros outside. Handwritten digits keep their labels under these."""

    def __init__(self, degrees: float = 12.0, shift: float = 2.5, scale: float = 0.1, shear: float = 0.15):
        self.degrees, self.shift, self.scale, self.shear = degrees, shift, scale, shear

    def __call__(self, xb: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        import torch.nn.functional as F

        n, _, h, w = xb.shape
        u = lambda *shape: torch.rand(*shape, generator=gen) * 2 - 1  # noqa: E731
        a = u(n) * self.degrees * np.pi / 180
        s = 1 + u(n) * self.scale
        sh = u(n) * self.shear
        t = u(n, 2) * self.shift * 2 / torch.tensor([w, h], dtype=torch.float32)
        th = torch.zeros(n, 2, 3)
        th[:, 0, 0], th[:, 0, 1] = torch.cos(a) / s, (sh - torch.sin(a)) / s
        th[:, 1, 0], th[:, 1, 1] = torch.sin(a) / s, torch.cos(a) / s
        th[:, :, 2] = t
        grid = F.affine_grid(th, list(xb.shape), align_corners=False)
        return F.grid_sample(xb, grid, align_corners=False, padding_mode="zeros")

    def describe(self) -> str:
        return (f"random affine per batch (rotation +-{self.degrees:g} deg, shift +-{self.shift:g} px, scale "
                f"+-{self.scale:g}, shear +-{self.shear:g})")


class RandomCropFlip:
    """Random translation by up to `pad` pixels (a crop of the zero-padded image) and a horizontal flip with
    probability 1/2, for every image of a batch (NCHW tensor), drawn from the training's seeded generator."""

    def __init__(self, pad: int = 3):
        self.pad = pad

    def __call__(self, xb: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        # the draws come from `gen` on the CPU whatever device xb is on, so a GPU run sees the CPU run's batches
        n, _, h, w = xb.shape
        p = self.pad
        padded = torch.nn.functional.pad(xb, (p, p, p, p))
        dy = torch.randint(0, 2 * p + 1, (n,), generator=gen).to(xb.device)
        dx = torch.randint(0, 2 * p + 1, (n,), generator=gen).to(xb.device)
        rows = (dy[:, None] + torch.arange(h, device=xb.device)[None, :])[:, None, :, None]
        out = padded.gather(2, rows.expand(n, xb.shape[1], h, w + 2 * p))
        cols = (dx[:, None] + torch.arange(w, device=xb.device)[None, :])[:, None, None, :]
        out = out.gather(3, cols.expand(n, xb.shape[1], h, w))
        flip = (torch.rand(n, generator=gen) < 0.5).to(xb.device)
        return torch.where(flip[:, None, None, None], out.flip(3), out)

    def describe(self) -> str:
        return f"a fresh random shift of up to {self.pad} px (zero padding) and horizontal flip of every batch"


class Cutout:
    """Zero one random `size` x `size` square of every image of a batch (NCHW; the square may overhang the border,
    as DeVries & Taylor 2017 cut it), drawn from the training's seeded generator. Applied after RandomCropFlip on
    standardised images, zero is the data set's mean."""

    def __init__(self, size: int = 8):
        self.size = int(size)

    def __call__(self, xb: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        if self.size <= 0:
            return xb
        n, _, h, w = xb.shape
        cy = torch.randint(0, h, (n,), generator=gen).to(xb.device)
        cx = torch.randint(0, w, (n,), generator=gen).to(xb.device)
        top, left = cy - self.size // 2, cx - self.size // 2
        rows = torch.arange(h, device=xb.device)[None, :]
        cols = torch.arange(w, device=xb.device)[None, :]
        in_rows = (rows >= top[:, None]) & (rows < (top + self.size)[:, None])
        in_cols = (cols >= left[:, None]) & (cols < (left + self.size)[:, None])
        keep = ~(in_rows[:, :, None] & in_cols[:, None, :])
        return xb * keep[:, None, :, :].to(xb.dtype)

    def describe(self) -> str:
        return f"a random {self.size}x{self.size} square of every image zeroed (cutout)"


def train(model: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int = 5, batch_size: int = 64,
          lr: float = 2e-3, seed: int = 0, threads: int = 2, x_val=None, y_val=None, progress: bool = True,
          weight_decay: float = 1e-4, clip: float = 1.0, callback=None, transform=None, optimizer: str = "adam",
          momentum: float = 0.9, label_smoothing: float = 0.0, pct_start: float = 0.15,
          channels_last: bool = False) -> list[dict]:
    """Adam (or ``optimizer="sgd"``: Nesterov SGD) + one-cycle schedule + gradient clipping (squares make early
    steps explosive).

    Returns one dict per epoch: loss, train accuracy, validation accuracy, seconds, CPU seconds. `callback`
    receives each dict (e.g. for W&B logging). `transform(xb, generator)` (e.g. RandomAffine()) distorts every
    training batch afresh. ``channels_last`` runs the convolutions in NHWC
    (1.7x faster for the 16-128-channel ResNet on the CPU). Deterministic for a given seed and thread count."""
    from tqdm.auto import tqdm

    set_determinism(seed, threads)
    xt, yt = torch.as_tensor(x), torch.as_tensor(y, dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, nesterov=True, weight_decay=weight_decay)
    else:
        raise ValueError(f"optimizer {optimizer!r} unknown; use 'adam' or 'sgd'")
    steps = max(1, epochs * ((len(yt) + batch_size - 1) // batch_size))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=pct_start)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    if channels_last:
        model.to(memory_format=fmt)
    history = []
    bar = tqdm(total=steps, desc="train", unit="step", disable=not progress, leave=False, mininterval=0.5)
    for ep in range(epochs):
        model.train()
        t0, c0, tot, correct, seen = time.perf_counter(), time.process_time(), 0.0, 0, 0
        perm = torch.randperm(len(yt), generator=gen)
        for i in range(0, len(yt), batch_size):
            idx = perm[i : i + batch_size]
            xb, yb = xt[idx], yt[idx]
            if transform is not None:
                xb = transform(xb, gen)
            if channels_last:
                xb = xb.contiguous(memory_format=fmt)
            opt.zero_grad(set_to_none=True)
            out = model(xb)
            loss = loss_fn(out, yb)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"training diverged at epoch {ep + 1} (loss {loss.item()}); "
                                         f"lower the learning rate (--lr) — x² activations amplify large inputs")
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            sched.step()
            tot += loss.item() * len(idx)
            correct += int((out.argmax(1) == yb).sum())
            seen += len(idx)
            bar.update(1)
            bar.set_postfix(epoch=ep + 1, loss=f"{tot / seen:.3f}")
        rec = {"epoch": ep + 1, "loss": tot / seen, "train_acc": correct / seen,
               "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}
        if x_val is not None:
            rec["val_acc"] = accuracy(model, x_val, y_val)
        history.append(rec)
        if callback:
            callback(rec)
    bar.close()
    model.eval()
    if channels_last:
        model.to(memory_format=torch.contiguous_format)
    return history
