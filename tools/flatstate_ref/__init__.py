"""flatstate PyTorch reference: model family, training and export helpers."""
