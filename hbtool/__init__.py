"""hbtool: take a float network to a Horizon Journey 5-class BPU artifact, with numbers on accuracy and speed."""

__version__ = "0.1.0"
