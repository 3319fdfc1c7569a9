"""``hbtool simulate``: run an artifact's integer program bit-exactly on the host.

:mod:`.movement`  numpy forms of the data-movement ops (reshape, transpose, slice, window ops...)
:mod:`.executor`  the program interpreter: integer kernels, data movement, CPU subgraphs in onnxruntime
:mod:`.inputs`    reading and checking the user's inputs (``.npy`` stacks, folders of images/arrays)
:mod:`.simulate`  the driver behind the CLI: batches, outputs, the comparison table
"""
