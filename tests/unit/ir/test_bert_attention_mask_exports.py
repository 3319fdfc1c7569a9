"""BERT-family encoders as transformers exports them: the newer attention-mask building and the
MatMul+Add layers that onnxruntime's optimizer fuses during the import's folds.

The model is written with onnx.helper in the shape transformers' exporter gives it (transformers
is not in the test venv): an int64 ``attention_mask`` becomes
Cast -> Unsqueeze -> And(GreaterOrEqual(arange, 0)) -> Expand -> Where(0, float-min), added to the
scores (the dynamo exporter picks the padding row with a GatherND instead). onnxruntime's fold
fuses some MatMul+Add into Reshape/Gemm/Reshape and names what it adds ``gemm_input_shape``...;
it leaves others (after a LayerNormalization, or after the context Reshape whose shape a
Shape/Gather/Concat chain computes) for a later session to fuse: the second fold after the opset
lift, or the calibration statistics session running hbtool's Linear bodies. On main that later
session generated the same names again and died (``graph_utils.cc AddInitializerWithOrtValue ...
Attempt to replace the existing tensor``: exit 3 in calibrate, exit 2 at import).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from hbtool.ir.fold_names import rename_invented_tensors, tensor_names
from tests.helpers import cosine, make_model, run_ort, tensor, vinfo

SEQ, EMBED, HIDDEN, HEADS, VOCAB, FFN = 8, 8, 16, 2, 50, 32


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def const(self, array, hint: str) -> str:
        self.count += 1
        name = f"/enc/{hint}_{self.count}"
        self.inits.append(tensor(name, np.asarray(array)))
        return name

    def node(self, op: str, inputs: list[str], hint: str, n_out: int = 1, **attrs) -> str | list[str]:
        self.count += 1
        name = f"/enc/{hint}/{op}_{self.count}"
        outs = [f"{name}_output_{k}" for k in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def unsqueeze(self, x: str, axes: list[int], hint: str, opset: int) -> str:
        if opset >= 13:
            return self.node("Unsqueeze", [x, self.const(np.array(axes, np.int64), "axes")], hint)
        return self.node("Unsqueeze", [x], hint, axes=axes)

    def layer_norm(self, x: str, hint: str, opset: int) -> str:
        """LayerNormalization from opset 17, else the decomposed form torch writes below it."""
        gamma = self.const((1 + 0.1 * self.rng.standard_normal(HIDDEN)).astype(np.float32), f"{hint}_gamma")
        beta = self.const((0.1 * self.rng.standard_normal(HIDDEN)).astype(np.float32), f"{hint}_beta")
        if opset >= 17:
            return self.node("LayerNormalization", [x, gamma, beta], hint, axis=-1, epsilon=1e-12)
        centered = self.node("Sub", [x, self.node("ReduceMean", [x], hint, axes=[-1])], hint)
        var = self.node("ReduceMean", [self.node("Pow", [centered, self.const(np.array(2.0, np.float32), "two")], hint)], hint, axes=[-1])
        std = self.node("Sqrt", [self.node("Add", [var, self.const(np.array(1e-12, np.float32), "eps")], hint)], hint)
        return self.node("Add", [self.node("Mul", [self.node("Div", [centered, std], hint), gamma], hint), beta], hint)

    def dense(self, x: str, n_in: int, n_out: int, hint: str) -> str:
        """MatMul + Add(bias first, as torch writes it): what onnxruntime's MatMulAddFusion fuses."""
        w = self.const((self.rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32), f"{hint}_w")
        b = self.const((self.rng.standard_normal(n_out) * 0.1).astype(np.float32), f"{hint}_b")
        return self.node("Add", [b, self.node("MatMul", [x, w], hint)], hint)


def _sdpa_mask(b: _Builder, opset: int) -> str:
    """transformers' sdpa/eager mask (torchscript export): padding AND "kv index >= 0", broadcast."""
    pad = b.unsqueeze(b.node("Cast", ["attention_mask"], "mask", to=TensorProto.BOOL), [1, 2], "mask", opset)
    index_ok = b.node("GreaterOrEqual", [b.const(np.arange(SEQ, dtype=np.int64).reshape(1, 1, SEQ, 1), "arange"),
                                          b.const(np.array(0, np.int64), "zero")], "mask")
    allowed = b.node("And", [b.node("And", [b.const(np.array(True), "true"), index_ok], "mask"), pad], "mask")
    return b.node("Expand", [allowed, b.const(np.array([1, 1, SEQ, SEQ], np.int64), "mask_shape")], "mask")


def _dynamo_mask(b: _Builder) -> str:
    """The same mask as torch.onnx's dynamo exporter writes it: the padding row picked by GatherND."""
    pad = b.node("Cast", ["attention_mask"], "mask", to=TensorProto.BOOL)
    index = np.stack([np.zeros(SEQ, np.int64), np.arange(SEQ, dtype=np.int64)], -1).reshape(1, 1, 1, SEQ, 2)
    picked = b.node("GatherND", [pad, b.const(index, "batch_and_kv_index")], "mask", batch_dims=0)
    return b.node("And", [b.const(np.ones((1, 1, SEQ, 1), bool), "query_ok"), picked], "mask")


def bert_like_model(opset: int = 13, layers: int = 2, seed: int = 0, mask_style: str = "sdpa") -> onnx.ModelProto:
    """input_ids, attention_mask (1, SEQ) int64 -> last hidden state (1, SEQ, HIDDEN)."""
    b = _Builder(seed)
    hd = HIDDEN // HEADS
    table = b.const((b.rng.standard_normal((VOCAB, EMBED)) * 0.5).astype(np.float32), "word_embeddings")
    pos = b.const((b.rng.standard_normal((1, SEQ, EMBED)) * 0.1).astype(np.float32), "position_embeddings")
    x = b.node("Add", [b.node("Gather", [table, "input_ids"], "embeddings", axis=0), pos], "embeddings")
    x = b.dense(x, EMBED, HIDDEN, "embedding_projection")  # ALBERT/ELECTRA-small: embeddings narrower than the encoder
    # onnxruntime does not fuse a MatMul+Add right after a LayerNormalization: those stay for
    # hbtool's Linear, whose body the calibration statistics session then fuses
    x = b.layer_norm(x, "embeddings/LayerNorm", opset)

    allowed = _dynamo_mask(b) if mask_style == "dynamo" else _sdpa_mask(b, opset)
    mask = b.node("Where", [allowed, b.const(np.array(0.0, np.float32), "keep"),
                            b.const(np.array(np.finfo(np.float32).min, np.float32), "float_min")], "mask")

    heads_shape = b.const(np.array([1, SEQ, HEADS, hd], np.int64), "heads_shape")
    for layer in range(layers):
        p = f"layer{layer}"
        q = b.node("Transpose", [b.node("Reshape", [b.dense(x, HIDDEN, HIDDEN, f"{p}/query"), heads_shape], p)], p, perm=[0, 2, 1, 3])
        k = b.node("Transpose", [b.node("Reshape", [b.dense(x, HIDDEN, HIDDEN, f"{p}/key"), heads_shape], p)], p, perm=[0, 2, 3, 1])
        v = b.node("Transpose", [b.node("Reshape", [b.dense(x, HIDDEN, HIDDEN, f"{p}/value"), heads_shape], p)], p, perm=[0, 2, 1, 3])
        scores = b.node("Div", [b.node("MatMul", [q, k], p), b.const(np.array(np.sqrt(hd), np.float32), "scale")], p)
        probs = b.node("Softmax", [b.node("Add", [scores, mask], p)], p, axis=-1)
        ctx = b.node("Transpose", [b.node("MatMul", [probs, v], p)], p, perm=[0, 2, 1, 3])
        # the context's shape from Shape/Gather/Concat, as torch.onnx writes view(*size[:-2], -1)
        shape = b.node("Shape", [ctx], p)
        dims = [b.unsqueeze(b.node("Gather", [shape, b.const(np.array(d, np.int64), "dim")], p, axis=0), [0], p, opset) for d in (0, 1)]
        ctx_shape = b.node("Concat", [*dims, b.const(np.array([HIDDEN], np.int64), "hidden")], p, axis=0)
        attn = b.dense(b.node("Reshape", [ctx, ctx_shape], p), HIDDEN, HIDDEN, f"{p}/output")
        x = b.layer_norm(b.node("Add", [attn, x], p), f"{p}/attention/LayerNorm", opset)
        ffn = b.dense(b.node("Relu", [b.dense(x, HIDDEN, FFN, f"{p}/intermediate")], p), FFN, HIDDEN, f"{p}/ffn_out")
        x = b.layer_norm(b.node("Add", [ffn, x], p), f"{p}/output/LayerNorm", opset)
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/enc/out"))
    inputs = [vinfo("input_ids", [1, SEQ], TensorProto.INT64), vinfo("attention_mask", [1, SEQ], TensorProto.INT64)]
    return make_model(b.nodes, inputs, [vinfo("last_hidden_state", [1, SEQ, HIDDEN])], b.inits, opset)


def _token_batches(count: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(count):
        mask = np.ones((1, SEQ), np.int64)
        mask[:, rng.integers(3, SEQ + 1):] = 0
        feeds.append({"input_ids": rng.integers(0, VOCAB, (1, SEQ)).astype(np.int64), "attention_mask": mask})
    return feeds


def _config_dict(model: onnx.ModelProto, tmp: Path) -> dict:
    onnx.save(model, tmp / "bert.onnx")
    dirs = {}
    for k, feed in enumerate(_token_batches(8, seed=1)):
        for name, arr in feed.items():
            dirs.setdefault(name, tmp / "cal" / name).mkdir(parents=True, exist_ok=True)
            np.save(dirs[name] / f"{k:02d}.npy", arr)
    return {
        "model_parameters": {"onnx_model": str(tmp / "bert.onnx"), "working_dir": str(tmp / "wd"), "output_model_file_prefix": "bert"},
        "input_parameters": {"input_name": "input_ids;attention_mask", "input_shape": f"1x{SEQ};1x{SEQ}",
                             "input_type_train": "featuremap;featuremap", "norm_type": "no_preprocess;no_preprocess"},
        "calibration_parameters": {"cal_data_dir": f"{dirs['input_ids']};{dirs['attention_mask']}", "cal_data_type": "int64;int64",
                                   "calibration_type": "max"},
    }


def _config(model: onnx.ModelProto, tmp: Path):
    from hbtool.config import config_from_dict

    return config_from_dict(_config_dict(model, tmp), base_dir=tmp)


@pytest.mark.parametrize("opset, mask_style", [(13, "sdpa"), (17, "sdpa"), (18, "dynamo")])
def test_bert_mask_encoder_goes_end_to_end(opset, mask_style, tmp_path):
    """calibrate -> compile -> simulate: exit 0, no float fallback, simulate == quantized ONNX, cosine."""
    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.compile import compile_model
    from hbtool.quant.calibrate import run_calibration, write_outputs
    from hbtool.simulator.executor import Executor

    model = bert_like_model(opset, mask_style=mask_style)
    cfg = _config(model, tmp_path)
    calibration = run_calibration(cfg)
    write_outputs(cfg, calibration, "")
    compiled = compile_model(cfg)
    assert compiled.fallbacks == [] and not [n for n in calibration.program.nodes if n.meta.get("fallback")]
    on = {n.meta.get("on") for n in calibration.graph.nodes if n.op_type in ("Softmax", "MatMul", "Linear", "Gemm")}
    assert on == {"BPU"}
    if mask_style == "dynamo":  # the run-time GatherND of the mask runs in a CPU subgraph
        gathers = [n for n in calibration.graph.nodes if n.op_type == "GatherND"]
        assert [n.meta.get("on") for n in gathers] == ["CPU"]
        assert gathers[0].name in {name for sub in compiled.cpu_subgraphs for name in sub.nodes}
        assert any(n.op_type == "GatherND" for sub in compiled.cpu_subgraphs for n in onnx.load_from_string(sub.onnx_bytes).graph.node)
    executor = Executor(from_bytes(compiled.data))
    quantized = tmp_path / "wd" / "bert_quantized_model.onnx"
    for feed in _token_batches(3, seed=7):
        got = executor.run(feed)["last_hidden_state"]
        want = run_ort(quantized, feed)[0]
        assert np.array_equal(got, want), np.abs(got - want).max()
        assert cosine(got, run_ort(model, feed)[0]) > 0.99


@pytest.mark.parametrize("opset, mask_style", [(13, "sdpa"), (18, "dynamo")])
def test_calibrate_and_compile_cli_exit_0(opset, mask_style, tmp_path):
    """On main: exit 2 at opset 13 (the second fold after the opset lift fused the projections
    after the context Reshape and collided with the first fold's names) and exit 3 at 18 (the
    statistics session fused hbtool's Linear bodies behind the LayerNorms and collided with the
    ``gemm_input_shape`` the import's fold had left in the model)."""
    import yaml
    from click.testing import CliRunner

    from hbtool.cli import main

    path = tmp_path / "bert.yaml"
    path.write_text(yaml.safe_dump(_config_dict(bert_like_model(opset, mask_style=mask_style), tmp_path)))
    for stage in ("calibrate", "compile"):
        result = CliRunner().invoke(main, [stage, "-c", str(path)])
        assert result.exit_code == 0, result.output


def test_fold_names_leave_no_onnxruntime_stems():
    """After the import's fold no tensor keeps a name onnxruntime generated (gemm_input_shape...)."""
    from hbtool.ir.onnx_import import _apply_input_shapes, _fold_with_onnxruntime

    model = bert_like_model(17)
    _apply_input_shapes(model, {})
    before = tensor_names(model)
    folded = _fold_with_onnxruntime(model)
    assert any(n.op_type == "Gemm" for n in folded.graph.node)  # onnxruntime fused MatMul+Add
    invented = tensor_names(folded) - before
    # every invented tensor is named after the node that writes or reads it, none keeps a stem
    # onnxruntime's generator gives out again (gemm_input_shape, ..._token_65_new_shape)
    assert invented and all(re.search(r"_(input|output)_\d+(_\d+)?$", name) for name in invented), sorted(invented)[:5]
    assert "gemm_input_shape" not in tensor_names(folded)


def test_rename_invented_tensors_keeps_the_model_computing_the_same():
    x = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)
    nodes = [helper.make_node("Add", ["x", "gemm_input_shape"], ["gemm_output_reshape_arg"], name="add"),
             helper.make_node("Relu", ["gemm_output_reshape_arg"], ["y"], name="relu")]
    model = make_model(nodes, [vinfo("x", [1, 4])], [vinfo("y", [1, 4])], [tensor("gemm_input_shape", np.ones((1, 4), np.float32))])
    want = run_ort(model, {"x": x})[0]
    assert rename_invented_tensors(model, {"x", "y"}) == 2
    assert tensor_names(model) == {"x", "y", "add_input_1", "add_output_0"}
    np.testing.assert_array_equal(run_ort(model, {"x": x})[0], want)
