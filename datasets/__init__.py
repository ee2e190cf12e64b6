"""Dataset loaders in torchvision layouts (imported as hemlp.datasets)."""
