"""The names of the ops hbtool writes into its graphs and programs (``Hz*``), one definition each.

The calibrated model, the quantized model (``*_quantized_model.onnx``) and the integer program
carry hbtool's own ops (domain ``hbtool``) next to the standard ONNX ones. Every stage that
writes or matches one of these names imports it from here, so a rename cannot leave a reader
behind. (The ``HzSQuantized*`` names in :mod:`hbtool.march.op_rules` are different: Horizon's
own op names, shown in the checker report as the BPU type of a node, never written into a graph.)
"""

from __future__ import annotations

# ---- the boundary, and markers of the float side
#: float -> integer codes on the CPU at a model input (``kernels.Quantize``)
HZ_QUANTIZE = "HzQuantize"
#: integer codes -> float on the CPU at a model output (``kernels.Dequantize``)
HZ_DEQUANTIZE = "HzDequantize"
#: the input preprocessing the config asks for (mean/scale, colour), a node of the calibrated model
HZ_PREPROCESS = "HzPreprocess"
#: a tensor's calibrated scale, recorded in the calibrated model
HZ_CALIBRATION = "HzCalibration"
#: a float subgraph the CPU runs (onnxruntime), one node of the program
HZ_CPU_SUBGRAPH = "HzCpuSubgraph"

# ---- integer kernels: "Hz" + the kernel class, except where noted
HZ_CONV = "HzConv"
HZ_CONV_TRANSPOSE = "HzConvTranspose"
HZ_LINEAR = "HzLinear"
#: MatMul and Log2MatMul kernels alike (both multiply two activations)
HZ_MATMUL = "HzMatMul"
HZ_ADD = "HzAdd"
HZ_MUL = "HzMul"
HZ_DIV = "HzDiv"
HZ_LUT = "HzLut"
HZ_SOFTMAX = "HzSoftmax"
HZ_LOG_SOFTMAX = "HzLogSoftmax"
HZ_PRELU = "HzPRelu"
#: elementwise Max / Min (``attrs["mode"]``)
HZ_MIN_MAX = "HzMinMax"
#: ArgMax / ArgMin (``attrs["mode"]``)
HZ_ARG_MAX = "HzArgMax"
HZ_LAYERNORM = "HzLayerNorm"
HZ_INPUT_CONVERT = "HzInputConvert"
HZ_MAXPOOL = "HzMaxPool"
HZ_AVGPOOL = "HzAvgPool"
HZ_REDUCE_MEAN = "HzReduceMean"
HZ_REDUCE_SUM = "HzReduceSum"
HZ_REDUCE_L2 = "HzReduceL2"
#: the bilinear resize kernel (``kernels.BilinearResize``)
HZ_RESIZE = "HzResize"

# ---- the compiler's data movement
#: an explicit copy into the layout a reader needs (the compiler's layout plan)
HZ_REORDER = "HzReorder"
#: a chain of reshapes and transposes the data-movement unit runs as one pass (``attrs["steps"]``)
HZ_REARRANGE = "HzRearrange"
