"""The J5 talk's error kinds: op error (isolated), model error (accumulated) and range flags."""
