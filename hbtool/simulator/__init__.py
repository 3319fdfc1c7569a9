"""``hbtool simulate``: run an artifact's integer program bit-exactly on the host.

:mod:`.movement`  numpy forms of the data-movement ops (reshape, transpose, slice, window ops...)
:mod:`.executor`  the program interpreter: integer kernels, data movement, CPU subgraphs in onnxruntime
:mod:`.batching`  many samples per pass: the sample axis through a one-sample program
:mod:`.accel`     exact faster forms of the kernels (products in onnxruntime)
:mod:`.fused`     the integer loops after the products, compiled by numba, rows over the cores
:mod:`.jit`       the loops' jit machinery: numba's cache policy, the row thread pool, the background compiler
:mod:`.inputs`    reading and checking the user's inputs (``.npy`` stacks, folders of images/arrays)
:mod:`.simulate`  the driver behind the CLI: batches, streamed and resumable outputs, the comparison table
"""
