"""Quantization: calibration data, preprocessing folded into the model, observers, PTQ, QDQ export."""
