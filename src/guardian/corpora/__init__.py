"""Dataset loaders and splits shared by training and evaluation."""
