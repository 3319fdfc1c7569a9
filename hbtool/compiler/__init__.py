"""``hbtool compile``: the integer program of a calibrated model, as one deployable artifact.

Pipeline (each step its own module):

:mod:`.source`     ``<prefix>_calibrated_model.onnx`` -> plan -> integer program (the same
                   lowering as calibrate's quantized model, so both compute the same integers)
:mod:`.units`      which BPU unit (tensor, vector, data movement) or the CPU runs each node
:mod:`.passes`     the transformer passes of the J5 talk, each tied to ``optimize_level``
:mod:`.cpu`        float CPU nodes grouped into ONNX subgraphs
:mod:`.layout`     per-unit alignment, padded shapes, explicit reorders, padding waste
:mod:`.memory`     SRAM allocation by live range, spills to DDR, DDR bytes per frame
:mod:`.artifact`   the ``.hbm`` file: versioned header, blobs, checksum, deterministic bytes
:mod:`.compile`    the driver behind the CLI
:mod:`.info`       ``hbtool info``
"""
