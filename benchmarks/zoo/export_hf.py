"""Build ``transformers`` architectures from their config classes (seeded random weights) and export them.

Nothing is downloaded: every model is ``XForY(XConfig(...))`` with the published small variant's
sizes where the default config is big, ``torch.manual_seed(0)`` before construction. Image
models take ``pixel_values`` and return their first output (logits, or ``last_hidden_state``);
text models take int64 ``input_ids`` and ``attention_mask`` of 1x64 and return
``last_hidden_state``. Exported with ``torch.onnx.export`` (``dynamo=False`` at the spec's
opset, or ``dynamo=True`` for the ``*_dynamo`` entries, which needs onnxscript).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from benchmarks.zoo.corpus import SEQ_LEN, ModelSpec


def _image_model(name: str) -> torch.nn.Module:
    import transformers as t

    base = name.removesuffix("_op17").removesuffix("_op13").removesuffix("_dynamo")
    vit_tiny = dict(hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768)
    table = {
        "hf_vit_tiny": lambda: t.ViTForImageClassification(t.ViTConfig(**vit_tiny, num_labels=1000)),
        "hf_deit_tiny": lambda: t.DeiTForImageClassificationWithTeacher(t.DeiTConfig(**vit_tiny, num_labels=1000)),
        "hf_swin_t": lambda: t.SwinForImageClassification(t.SwinConfig(num_labels=1000)),
        "hf_swinv2_t": lambda: t.Swinv2ForImageClassification(t.Swinv2Config(num_labels=1000)),
        "hf_convnext_t": lambda: t.ConvNextForImageClassification(t.ConvNextConfig(num_labels=1000)),
        "hf_convnextv2_atto": lambda: t.ConvNextV2ForImageClassification(t.ConvNextV2Config(
            hidden_sizes=[40, 80, 160, 320], depths=[2, 2, 6, 2], num_labels=1000)),
        "hf_mobilevit_xxs": lambda: t.MobileViTForImageClassification(t.MobileViTConfig(
            hidden_sizes=[64, 80, 96], neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320], expand_ratio=2.0,
            image_size=256, num_labels=1000)),
        "hf_mobilevitv2_050": lambda: t.MobileViTV2ForImageClassification(t.MobileViTV2Config(
            width_multiplier=0.5, image_size=256, num_labels=1000)),
        "hf_levit_128s": lambda: t.LevitForImageClassification(t.LevitConfig(
            hidden_sizes=[128, 256, 384], num_attention_heads=[4, 6, 8], depths=[2, 3, 4], key_dim=[16, 16, 16],
            drop_path_rate=0, mlp_ratio=[2, 2, 2], attention_ratio=[2, 2, 2], num_labels=1000)),
        "hf_pvtv2_b0": lambda: t.PvtV2ForImageClassification(t.PvtV2Config(num_labels=1000)),
        "hf_segformer_b0": lambda: t.SegformerForSemanticSegmentation(t.SegformerConfig(num_labels=19)),
        "hf_dinov2_s": lambda: t.Dinov2Model(t.Dinov2Config(hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                                                            image_size=224, patch_size=14)),
        "hf_beit_s": lambda: t.BeitForImageClassification(t.BeitConfig(
            hidden_size=384, num_hidden_layers=6, num_attention_heads=6, intermediate_size=1536,
            use_relative_position_bias=True, use_mean_pooling=True, num_labels=1000)),
        "hf_poolformer_s12": lambda: t.PoolFormerForImageClassification(t.PoolFormerConfig(num_labels=1000)),
        "hf_cvt_13": lambda: t.CvtForImageClassification(t.CvtConfig(num_labels=1000)),
        "hf_focalnet_t": lambda: t.FocalNetForImageClassification(t.FocalNetConfig(num_labels=1000)),
        "hf_regnet_y": lambda: t.RegNetForImageClassification(t.RegNetConfig(
            hidden_sizes=[48, 104, 208, 440], depths=[1, 3, 6, 6], groups_width=8, layer_type="y", num_labels=1000)),
        "hf_resnet50": lambda: t.ResNetForImageClassification(t.ResNetConfig(num_labels=1000)),
        "hf_mobilenet_v1": lambda: t.MobileNetV1ForImageClassification(t.MobileNetV1Config(num_labels=1000)),
        "hf_mobilenet_v2": lambda: t.MobileNetV2ForImageClassification(t.MobileNetV2Config(num_labels=1000)),
        "hf_efficientnet_b0": lambda: t.EfficientNetForImageClassification(t.EfficientNetConfig(
            width_coefficient=1.0, depth_coefficient=1.0, image_size=224, dropout_rate=0.2, hidden_dim=1280, num_labels=1000)),
        "hf_yolos_tiny": lambda: t.YolosForObjectDetection(t.YolosConfig(
            hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768,
            image_size=[320, 320], num_detection_tokens=100)),
    }
    return table[base]()


def _text_model(name: str) -> torch.nn.Module:
    import transformers as t

    base = name.removesuffix("_op17").removesuffix("_dynamo")
    small = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
    table = {
        "hf_bert_4l": lambda: t.BertModel(t.BertConfig(**small)),
        "hf_distilbert": lambda: t.DistilBertModel(t.DistilBertConfig(dim=384, n_layers=6, n_heads=6, hidden_dim=1536)),
        "hf_albert": lambda: t.AlbertModel(t.AlbertConfig(embedding_size=128, hidden_size=384, num_hidden_layers=6,
                                                          num_attention_heads=6, intermediate_size=1536)),
        "hf_mobilebert": lambda: t.MobileBertModel(t.MobileBertConfig(num_hidden_layers=6)),
        "hf_electra_small": lambda: t.ElectraModel(t.ElectraConfig()),
        "hf_roberta_4l": lambda: t.RobertaModel(t.RobertaConfig(**small, vocab_size=50265, max_position_embeddings=514)),
    }
    return table[base]()


def _speech_model(name: str) -> torch.nn.Module:
    """The base speech encoders (12 layers, 768 wide; their configs' defaults): a 7-layer Conv1d feature
    extractor on the raw 16 kHz waveform (group norm after the first), a convolutional position
    embedding, then the transformer; ``last_hidden_state`` out."""
    import transformers as t

    table = {
        "hf_wav2vec2_base": lambda: t.Wav2Vec2Model(t.Wav2Vec2Config()),
        "hf_hubert_base": lambda: t.HubertModel(t.HubertConfig()),
    }
    return table[name]()


class FirstOutput(torch.nn.Module):
    """Return the model's first output as one tensor, so every export has one named output."""

    def __init__(self, inner: torch.nn.Module, text: bool, speech: bool = False):
        super().__init__()
        self.inner = inner
        self.text = text
        self.speech = speech

    def forward(self, *args):
        if self.text:
            out = self.inner(input_ids=args[0], attention_mask=args[1])
        elif self.speech:
            out = self.inner(input_values=args[0])
        else:
            out = self.inner(pixel_values=args[0])
        return out[0]


#: models whose transformers init (normal, std 0.02 or truncated, for every conv) shrinks the activations layer
#: after layer until the float output is 1e-21 to 1e-41: a signal-preserving re-init makes them a real test
FAN_IN_INIT = {"hf_mobilevit_xxs", "hf_mobilenet_v1", "hf_mobilenet_v2"}


def _fan_in_init(model: torch.nn.Module, size: int) -> None:
    """He-normal weights for convs and linears, biases zero, then BatchNorm statistics measured on
    random images (train-mode passes, cumulative averages), so every BN output has unit variance as
    in a trained network and nothing decays towards zero."""
    for m in model.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(pixel_values=torch.randn(8, 3, size, size))
    model.eval()


def export(spec: ModelSpec, path: Path) -> None:
    torch.manual_seed(0)
    text = spec.inputs == "text"
    speech = spec.extra.get("data") == "speech"
    inner = _text_model(spec.name) if text else _speech_model(spec.name) if speech else _image_model(spec.name)
    if spec.name in FAN_IN_INIT:
        _fan_in_init(inner, spec.shape[-1])
    try:
        inner.config._attn_implementation = "eager"     # the plain attention graph users export
    except Exception:
        pass
    model = FirstOutput(inner.eval(), text, speech).eval()
    if text:
        ids = torch.randint(1000, spec.vocab, (1, SEQ_LEN))
        mask = torch.ones(1, SEQ_LEN, dtype=torch.int64)
        mask[:, SEQ_LEN * 3 // 4:] = 0
        args, names, out = (ids, mask), ["input_ids", "attention_mask"], ["last_hidden_state"]
    elif speech:
        args, names, out = (torch.randn(*spec.features[0].shape),), ["input_values"], ["last_hidden_state"]
    else:
        args, names, out = (torch.randn(*spec.shape),), ["pixel_values"], ["output"]
    tmp = path.with_suffix(".tmp.onnx")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if spec.extra["dynamo"]:
            prog = torch.onnx.export(model, args, dynamo=True, opset_version=spec.extra["opset"], input_names=names,
                                     output_names=out, external_data=False)
            prog.save(str(tmp))
        else:
            torch.onnx.export(model, args, str(tmp), dynamo=False, opset_version=spec.extra["opset"],
                              input_names=names, output_names=out, do_constant_folding=True)
    tmp.replace(path)
