"""Sample files in and out, below the quantizer and the emulator, which both read and judge samples.

* :mod:`.files`: which files are samples (one suffix list for every input type), the sorted
  listing of a folder, safe file names for per-tensor outputs;
* :mod:`.images`: an image file decoded to the input's size and training colour order;
* :mod:`.samples`: one input's folder of samples (images, ``.npy``, raw dumps, ``.nv12`` frames),
  validated up front and read on demand; the input descriptions it needs;
* :mod:`.colour`: the one RGB <-> YUV conversion (built on :mod:`hbtool.kernels.colour`, the
  chip's integer converter), so calibration and the emulator see a camera frame identically;
* :mod:`.runtime_input`: the run-time input formats (the chip's buffers) and the camera's
  conversion of training-type pixels to them;
* :mod:`.metrics`: error metrics between a float tensor and its quantized counterpart.

Layering: ``io`` imports only ``kernels``, ``ir``, ``config`` and ``utils``/``errors``; ``quant``,
``simulator`` and everything above import it.
"""
