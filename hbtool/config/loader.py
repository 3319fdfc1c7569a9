"""Load and validate a YAML config into typed objects, driven by the key table in schema.py.

Every error is a ConfigError whose message starts with the key path
(``input_parameters.input_shape: ...``) and carries a fix.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

import yaml

from hbtool.errors import ConfigError
from hbtool.config import schema as S
from hbtool.config.schema import GROUPS, PER_INPUT_KEYS, Key
from hbtool.config.types import (CalibrationParams, CompilerParams, DebugParams, GateParams,
                                 HbConfig, InputSpec, ModelParams, QatParams)
from hbtool.config.values import (closest, describe, fail, format_shape, is_none_word, is_unset,
                                  parse_floats, parse_shape, read_bool, read_enum, read_enum_list,
                                  read_float, read_int, read_names, read_path, read_str,
                                  split_list)

# group -> dataclass holding that group's keys as fields (input_parameters is special).
GROUP_CLASSES = {
    "model_parameters": ModelParams,
    "calibration_parameters": CalibrationParams,
    "compiler_parameters": CompilerParams,
    "qat_parameters": QatParams,
    "debug_parameters": DebugParams,
    "gate_parameters": GateParams,
}
# input_parameters key -> InputSpec field (per-input keys) or HbConfig field (the others).
INPUT_FIELDS = {
    "input_name": "name",
    "input_type_train": "type_train",
    "input_type_rt": "type_rt",
    "input_layout_train": "layout_train",
    "input_layout_rt": "layout_rt",
    "input_space_and_range": "space_and_range",
    "input_shape": "shape",
    "norm_type": "norm_type",
    "mean_value": "mean",
    "scale_value": "scale",
    "cal_data_dir": "cal_data_dir",
    "cal_data_type": "cal_data_type",
}
INPUT_GLOBAL_FIELDS = {"input_batch": "input_batch", "separate_batch": "separate_batch"}


def _check_tables_match_classes() -> None:
    """The key table and the dataclasses must agree; fail loudly at import if they drift."""
    for group, cls in GROUP_CLASSES.items():
        table, _ = GROUPS[group]
        keys = {k.name for k in table.values() if k.unsupported is None}
        fields = {f.name for f in dataclasses.fields(cls)}
        if keys != fields:
            raise RuntimeError(f"hbtool.config: {cls.__name__} fields and the {group} key table "
                               f"differ: {sorted(keys ^ fields)}")
    spec_fields = {f.name for f in dataclasses.fields(InputSpec)}
    for name, (_, key) in PER_INPUT_KEYS.items():
        if INPUT_FIELDS.get(name) not in spec_fields:
            raise RuntimeError(f"hbtool.config: per-input key {name} has no InputSpec field")
    cfg_fields = {f.name for f in dataclasses.fields(HbConfig)}
    for name, key in GROUPS["input_parameters"][0].items():
        if not key.per_input and INPUT_GLOBAL_FIELDS.get(name) not in cfg_fields:
            raise RuntimeError(f"hbtool.config: input key {name} has no HbConfig field")


_check_tables_match_classes()

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------
# YAML reading
# ----------------------------------------------------------------------------------------------

class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            continue  # SafeLoader reports the unhashable key itself
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key '{key}' appears twice (first on line {seen[key] + 1})",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
# YAML 1.1 (PyYAML) reads `1e6` and `1e-3` as strings (it wants `1.0e+6`); YAML 1.2 and every user read them
# as numbers, so a limit such as `min_fps: 1e6` is a number here too.
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def load_config(path: str | Path, *, require_model: bool = True,
                overrides: dict[str, dict[str, Any]] | None = None) -> HbConfig:
    """Read a YAML config file into an HbConfig.

    Relative paths in the file are taken from the file's folder. ``overrides`` (same shape as
    the YAML, e.g. ``{"model_parameters": {"onnx_model": "/abs/m.onnx"}}``) replaces keys before
    validation, so defaults that depend on them (the file prefix) follow; give absolute paths
    there, or paths relative to the YAML file's folder.
    """
    p = Path(path)
    if not p.is_file():
        what = "is a folder, not a file" if p.is_dir() else "not found"
        raise ConfigError(f"{p}: config file {what}", "give the path of a YAML config file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read the config file ({exc})",
                          "check that it is a readable UTF-8 text file") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: {_yaml_problem(exc)}",
                          "fix the YAML at that line (indentation, a ':' after each key, "
                          "matching quotes)") from None
    return config_from_dict(data, base_dir=p.resolve().parent, require_model=require_model,
                            overrides=overrides, source=p.resolve())


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"invalid YAML{where}: {problem}"


# ----------------------------------------------------------------------------------------------
# from a dict
# ----------------------------------------------------------------------------------------------

def config_from_dict(data: Any, base_dir: str | Path | None = None, *, require_model: bool = True,
                     overrides: dict[str, dict[str, Any]] | None = None,
                     source: Path | None = None) -> HbConfig:
    """Validate a config given as a dict (as loaded from YAML) into an HbConfig.

    ``base_dir`` is the folder relative paths are taken from (default: the current folder).
    ``require_model=False`` allows a config without ``onnx_model``, for commands that get the
    model on the command line.
    """
    base = Path(base_dir).resolve() if base_dir is not None else Path.cwd()
    where = str(source) if source is not None else "config"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level must be a mapping of groups "
                          f"(model_parameters:, input_parameters:, ...), got {describe(data)}",
                          "start the file with 'model_parameters:' and indent its keys under it")
    groups = _read_groups(data)
    if overrides:
        for gname, gval in _read_groups(overrides).items():
            groups.setdefault(gname, {}).update(gval)
    return _Builder(groups, base, require_model, source).build()


def _read_groups(data: dict[Any, Any]) -> dict[str, dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {name: {} for name in GROUPS}
    for gname, gval in data.items():
        if not isinstance(gname, str):
            fail(str(gname), f"group names must be text, got {describe(gname)}",
                 f"use one of {', '.join(GROUPS)}")
        if gname in S.UNSUPPORTED_GROUPS:
            problem, fix = S.UNSUPPORTED_GROUPS[gname]
            fail(gname, problem, fix)
        if gname not in GROUPS:
            owners = [g for g, (t, _) in GROUPS.items() if gname in t]
            if owners:
                fail(gname, f"'{gname}' is a key of {owners[0]}, not a group",
                     f"indent it under {owners[0]}:")
            guess = closest(gname, GROUPS)
            hint = f"did you mean '{guess}'? " if guess else ""
            fail(gname, "unknown group", f"{hint}the groups are {', '.join(GROUPS)}")
        if gval is None:
            gval = {}
        if not isinstance(gval, dict):
            fail(gname, f"expected a mapping of keys, got {describe(gval)}",
                 f"indent the keys of {gname} under it, one 'key: value' per line")
        table, _ = GROUPS[gname]
        for key in gval:
            if not isinstance(key, str):
                fail(f"{gname}.{key}", f"key names must be text, got {describe(key)}",
                     "quote the key or fix the indentation")
            if key not in table:
                _unknown_key(gname, key)
        groups[gname] = dict(gval)
    return groups


def _unknown_key(group: str, key: str) -> None:
    table, _ = GROUPS[group]
    path = f"{group}.{key}"
    owners = [g for g, (t, _) in GROUPS.items() if key in t and g != group]
    if owners:
        fail(path, f"unknown key in {group}; '{key}' belongs to {' / '.join(owners)}",
             f"move it under {owners[0]}:")
    guess = closest(key, table)
    if guess:
        fail(path, f"unknown key (did you mean '{guess}'?)", f"rename it to {guess}")
    fail(path, "unknown key", f"remove it; the keys of {group} are listed in docs/config.md")


def _read_value(path: str, key: Key, value: Any, base: Path) -> Any:
    k = key.kind
    if k == "bool":
        return read_bool(path, value)
    if k == "int":
        return read_int(path, value, key.min, key.max, key.min_exclusive, key.allowed_doc)
    if k == "float":
        return read_float(path, value, key.min, key.max, key.min_exclusive, key.allowed_doc)
    if k == "str":
        return read_str(path, value)
    if k == "enum":
        assert key.allowed is not None
        return read_enum(path, value, key.allowed)
    if k == "metric":
        assert key.allowed is not None
        if isinstance(value, str) and ":" in value:
            module, _, func = value.strip().partition(":")
            if not module.strip() or not func.strip().isidentifier():
                fail(path, f"'{value}' is not of the form module:function", "write e.g. 'my_metrics:top1'")
            return value.strip()
        return read_enum(path, value, key.allowed)
    if k == "path":
        return read_path(path, value, base)
    if k == "names":
        return read_names(path, value)
    if k == "enum_list":
        assert key.allowed is not None
        return read_enum_list(path, value, key.allowed)
    if k == "optimization":
        from hbtool.config.optimization import read_optimization

        return read_optimization(path, value)
    if k == "node_info":
        return _read_node_info(path, value)
    if k == "input_source":
        return _read_input_source(path, value)
    raise AssertionError(f"no reader for kind {k}")


# ----------------------------------------------------------------------------------------------
# node_info and input_source
# ----------------------------------------------------------------------------------------------

_NODE_SUBKEY = re.compile(r"^(ON|InputType\d*|OutputType|Weight|WeightType)$")


def _empty_node_entry() -> dict[str, str | None]:
    return {"ON": None, "InputType": None, "OutputType": None}


def _node_short(path: str, node: str, what: Any) -> dict[str, str | None]:
    entry = _empty_node_entry()
    text = what.strip() if isinstance(what, str) else what
    if isinstance(text, str) and text.upper() in S.NODE_INFO_ON:
        entry["ON"] = text.upper()
    elif isinstance(text, str) and text.lower() in S.NODE_INFO_DTYPES:
        entry["InputType"] = entry["OutputType"] = text.lower()
    else:
        fail(f"{path}.{node}", f"expected int8, int16, BPU, CPU or a mapping, got {describe(what)}",
             "write e.g. {ON: BPU, InputType: int16, OutputType: int16}")
    return entry


def _read_node_info(path: str, value: Any) -> dict[str, dict[str, str | None]]:
    out: dict[str, dict[str, str | None]] = {}
    if isinstance(value, str):
        for part in split_list(path, value, ";"):
            if ":" not in part:
                fail(path, f"'{part}' is not of the form node:int16",
                     "write 'node1:int16;node2:int16', or use the mapping form")
            node, what = part.rsplit(":", 1)
            out[node.strip()] = _node_short(path, node.strip(), what)
        return out
    if not isinstance(value, dict):
        fail(path, f"expected a mapping of node names, got {describe(value)}",
             "write {node_name: {ON: BPU, InputType: int16}}")
    for node, spec in value.items():
        if not isinstance(node, str):
            fail(path, f"node names must be text, got {describe(node)}", "quote the node name")
        npath = f"{path}.{node}"
        if isinstance(spec, str):
            out[node] = _node_short(path, node, spec)
            continue
        if not isinstance(spec, dict) or not spec:
            fail(npath, f"expected a mapping such as {{ON: CPU}}, got {describe(spec)}",
                 "give at least one of ON, InputType, OutputType")
        entry = _empty_node_entry()
        for sub, val in spec.items():
            # YAML 1.1 reads an unquoted ON (or on) as the boolean true.
            canon = "ON" if sub is True else _canonical_subkey(str(sub))
            if canon is None:
                guess = closest(str(sub), ["ON", "InputType", "OutputType", "Weight", "WeightType"])
                hint = f"did you mean '{guess}'? " if guess else ""
                fail(f"{npath}.{sub}", "unknown node_info key",
                     f"{hint}use ON, InputType, InputType<i>, OutputType, Weight or WeightType")
            if is_unset(val):
                entry.setdefault(canon, None)
                continue
            if canon == "ON":
                entry[canon] = read_enum(f"{npath}.{canon}", val, S.NODE_INFO_ON)
            elif canon == "Weight":
                entry[canon] = read_enum(f"{npath}.{canon}", val, S.NODE_INFO_WEIGHT)
            elif canon == "WeightType":
                entry[canon] = read_enum(f"{npath}.{canon}", val, S.NODE_INFO_WEIGHT_TYPES)
            elif canon == "InputType":
                entry[canon] = read_enum(f"{npath}.{canon}", val, S.NODE_INFO_INPUT_DTYPES)
            else:
                entry[canon] = read_enum(f"{npath}.{canon}", val, S.NODE_INFO_DTYPES)
        out[node] = entry
    return out


def _canonical_subkey(sub: str) -> str | None:
    for canon in ("ON", "InputType", "OutputType", "Weight", "WeightType"):
        if sub.lower() == canon.lower():
            return canon
    m = re.fullmatch(r"inputtype(\d+)", sub.lower())
    if m:
        return f"InputType{int(m.group(1))}"
    return None


def _merge_node(path: str, node: str, base: dict[str, str | None],
                extra: dict[str, str | None], other: str) -> None:
    for sub, val in extra.items():
        if val is None:
            base.setdefault(sub, None)
            continue
        if base.get(sub) not in (None, val):
            fail(f"{path}.{node}.{sub}", f"{val} contradicts {other} ({base[sub]})",
                 f"keep only one setting for node '{node}'")
        base[sub] = val


def _read_input_source(path: str, value: Any) -> dict[str, str]:
    if isinstance(value, str):
        return {"_default_value": read_enum(path, value, S.INPUT_SOURCES)}
    if not isinstance(value, dict):
        fail(path, f"expected a mapping {{input_name: ddr|pyramid|resizer}}, got {describe(value)}",
             "write e.g. {data: pyramid}")
    out = {}
    for name, src in value.items():
        if not isinstance(name, str):
            fail(path, f"input names must be text, got {describe(name)}", "quote the input name")
        out[name] = read_enum(f"{path}.{name}", src, S.INPUT_SOURCES)
    return out


# ----------------------------------------------------------------------------------------------
# per-input lists
# ----------------------------------------------------------------------------------------------

def _split_entries(path: str, key: Key, value: Any) -> list[Any]:
    """A per-input key's value as a list of raw entries (None = no value for that input)."""
    if is_unset(value):
        return []
    if isinstance(value, bool):
        fail(path, f"expected {_entry_wanted(key)}, got {describe(value)}",
             "see docs/config.md for the format")
    if isinstance(value, str):
        parts = value.strip().strip(";").split(";")
        return [None if is_none_word(p) else p.strip() for p in parts]
    if isinstance(value, (int, float)):
        if key.kind in ("floats", "shape"):
            return [value]
        if key.name == "input_name" and isinstance(value, int):
            return [str(value)]  # an input named e.g. 0
        fail(path, f"expected {_entry_wanted(key)}, got {describe(value)}",
             "write the value as text")
    if isinstance(value, list):
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        if key.kind in ("floats", "shape") and numeric:
            return [value]  # a list of numbers is one input's values
        if key.name == "input_name":
            value = [str(v) if isinstance(v, int) and not isinstance(v, bool) else v
                     for v in value]
        return [None if is_none_word(v) else v for v in value]
    fail(path, f"expected {_entry_wanted(key)}, got {describe(value)}",
         "write one ';'-separated entry per input, or a YAML list")


def _entry_wanted(key: Key) -> str:
    return {
        "shape": "a shape like 1x3x224x224",
        "floats": "numbers separated by spaces",
        "path": "a folder path",
    }.get(key.kind, "text")


def _check_march(value: Any) -> None:
    if isinstance(value, str) and value.strip().lower() in S.OTHER_MARCH:
        chip = S.OTHER_MARCH[value.strip().lower()]
        fail("model_parameters.march",
             f"'{value.strip()}' ({chip}) is not supported; hbtool supports "
             f"{', '.join(S.SUPPORTED_MARCH)}",
             "set march to bayes (J5, RDK Ultra), bayes-e (RDK X5) or bernoulli2 (RDK X3)")


class _Builder:
    def __init__(self, groups: dict[str, dict[str, Any]], base: Path, require_model: bool,
                 source: Path | None):
        self.groups = groups
        self.base = base
        self.require_model = require_model
        self.source = source
        self.vals: dict[str, dict[str, Any]] = {g: {} for g in GROUPS}
        self.given: dict[str, set[str]] = {g: set() for g in GROUPS}

    # -- plain keys ------------------------------------------------------------------------------
    def read_plain_keys(self) -> None:
        for group, (table, _) in GROUPS.items():
            raw = self.groups[group]
            for name, key in table.items():
                path = f"{group}.{name}"
                value = raw.get(name)
                if key.unsupported is not None:
                    if not is_unset(value):
                        fail(path, *key.unsupported)
                    continue
                if key.per_input:
                    continue
                if is_unset(value):
                    default = copy.deepcopy(key.default)
                    if key.kind == "path" and default is not None:
                        default = read_path(path, default, self.base)
                    self.vals[group][name] = default
                else:
                    if name == "march" and group == "model_parameters":
                        _check_march(value)
                    self.vals[group][name] = _read_value(path, key, value, self.base)
                    self.given[group].add(name)

    # -- model ---------------------------------------------------------------------------------
    def check_model(self) -> None:
        m = self.vals["model_parameters"]
        if "check_model_output_consistency" in m["debug_mode"]:
            fail("model_parameters.debug_mode",
                 "check_model_output_consistency: hbtool does not compare the compiled model with "
                 "the quantized ONNX during compile; simulate does it, bit for bit",
                 "remove it and run hbtool simulate <prefix>.bin -i <input>=<samples> --compare "
                 "<prefix>_quantized_model.onnx")
        if m["onnx_model"] is None and self.require_model:
            fail("model_parameters.onnx_model", "required: no model given",
                 "set model_parameters.onnx_model to the float ONNX file (or pass --model)")
        prefix = m["output_model_file_prefix"]
        if prefix is None:
            onnx = m["onnx_model"]
            m["output_model_file_prefix"] = onnx.stem if onnx is not None else "model"
        elif "/" in prefix or "\\" in prefix:
            fail("model_parameters.output_model_file_prefix",
                 f"'{prefix}' is a path; this is only a file name prefix",
                 "put the folder in model_parameters.working_dir and the name here")

    # -- inputs --------------------------------------------------------------------------------
    def read_inputs(self) -> list[InputSpec]:
        entries: dict[str, list[Any]] = {}
        for name, (group, key) in PER_INPUT_KEYS.items():
            entries[name] = _split_entries(f"{group}.{name}", key,
                                           self.groups[group].get(name))

        def kpath(name: str) -> str:
            return f"{PER_INPUT_KEYS[name][0]}.{name}"

        if entries["input_name"]:
            n, anchor = len(entries["input_name"]), "input_name"
        else:
            counts = {name: len(e) for name, e in entries.items() if e}
            n = max(counts.values(), default=0)
            anchor = next((name for name, c in counts.items() if c == n), "input_name")
            if n > 1:
                fail("input_parameters.input_name",
                     f"required when there are several inputs ({kpath(anchor)} has {n} entries)",
                     "list the model's input names, ';'-separated, in the order the other "
                     "per-input lists follow")
        for name, e in entries.items():
            if not e or len(e) == n:
                continue
            key = PER_INPUT_KEYS[name][1]
            if len(e) == 1 and key.broadcast:
                entries[name] = e * n
                continue
            fix = "give one ';'-separated entry per input, in input_name order (None for an " \
                  "input without a value)"
            if key.broadcast:
                fix += ", or a single entry for all inputs"
            fail(kpath(name), f"has {len(e)} {'entry' if len(e) == 1 else 'entries'} but "
                              f"{kpath(anchor)} has {n}", fix)

        names = self._read_names(entries["input_name"], n)
        specs = []
        for i in range(n):
            specs.append(self._read_input(i, n, names[i], {k: (e[i] if e else None)
                                                             for k, e in entries.items()}))
        return specs

    def _read_names(self, raw: list[Any], n: int) -> list[str | None]:
        path = "input_parameters.input_name"
        if not raw:
            return [None] * n
        names: list[str | None] = []
        for i, entry in enumerate(raw):
            if entry is None:
                if n == 1:
                    names.append(None)
                    continue
                fail(path, f"entry {i + 1} is empty", "give every input its name")
            name = read_str(path, entry)
            if name in names:
                fail(path, f"'{name}' is listed twice", "list each input once")
            names.append(name)
        return names

    def _read_input(self, i: int, n: int, name: str | None, e: dict[str, Any]) -> InputSpec:
        """One input's entries -> InputSpec, in named steps: values, types and layouts, image shape, preprocessing."""
        who = f"input '{name}'" if name is not None else (f"input {i + 1}" if n > 1 else "the input")
        pre = f"{who}: " if n > 1 or name is not None else ""

        def enum(key: str) -> str | None:
            if e[key] is None:
                return None
            allowed = PER_INPUT_KEYS[key][1].allowed
            assert allowed is not None
            try:
                return read_enum(_input_key_path(key), e[key], allowed)
            except ConfigError as exc:
                raise ConfigError(exc.problem.replace(": ", f": {pre}", 1), exc.fix) from None

        type_train = enum("input_type_train") or "featuremap"
        type_rt = enum("input_type_rt") or type_train
        layout_train = enum("input_layout_train")
        space = enum("input_space_and_range") or "regular"
        norm = enum("norm_type") or "no_preprocess"
        cal_type = enum("cal_data_type")
        shape = self._shape(pre, e["input_shape"])
        mean = self._floats(_input_key_path("mean_value"), pre, e["mean_value"])
        scale = self._floats(_input_key_path("scale_value"), pre, e["scale_value"])
        cal_dir = None
        if e["cal_data_dir"] is not None:
            cal_dir = read_path(_input_key_path("cal_data_dir"), e["cal_data_dir"], self.base)
        layout_rt = _types_and_layouts(pre, type_train, type_rt, layout_train, enum("input_layout_rt"))
        channels = _image_shape_channels(pre, shape, type_train, type_rt, layout_train)
        if space != "regular" and type_rt != "nv12":
            fail(_input_key_path("input_space_and_range"),
                 f"{pre}{space} applies only to nv12 input, but input_type_rt is {type_rt}",
                 "remove input_space_and_range or set it to regular")
        mean, scale = _preprocessing_values(pre, norm, mean, scale, channels)
        if cal_type is None:
            f32_dir = cal_dir is not None and cal_dir.name.lower().endswith("_f32")
            cal_type = "float32" if f32_dir or type_train == "featuremap" else "uint8"
        return InputSpec(name=name, shape=shape, type_train=type_train, type_rt=type_rt,
                         layout_train=layout_train, layout_rt=layout_rt, norm_type=norm,
                         mean=mean, scale=scale, cal_data_dir=cal_dir, cal_data_type=cal_type,
                         space_and_range=space)

    @staticmethod
    def _shape(pre: str, entry: Any) -> tuple[int, ...] | None:
        """``input_shape``: ``1x3x224x224``, or ``scalar`` for a rank-0 input (None: not given)."""
        if entry is None:
            return None
        try:
            return parse_shape(entry)
        except ValueError as exc:
            fail(_input_key_path("input_shape"), f"{pre}{exc}",
                 "write the fixed shape with 'x' between dimensions, e.g. 1x3x224x224 (scalar for a rank-0 input)")

    @staticmethod
    def _floats(path: str, pre: str, entry: Any) -> tuple[float, ...] | None:
        if entry is None:
            return None
        try:
            return parse_floats(entry)
        except ValueError as exc:
            fail(path, f"{pre}{exc}", "write e.g. '123.675 116.28 103.53', or one number")

    def check_input_globals(self, specs: list[InputSpec]) -> None:
        batch = self.vals["input_parameters"]["input_batch"]
        if batch > 1:
            if len(specs) > 1:
                fail("input_parameters.input_batch",
                     f"input_batch {batch} works only for single-input models; this one has "
                     f"{len(specs)} inputs", "remove input_batch or set it to 1")
            if specs and specs[0].shape is not None and specs[0].shape[0] != 1:
                fail("input_parameters.input_batch",
                     f"input_batch {batch} needs the input's first dimension to be 1, got "
                     f"'{format_shape(specs[0].shape)}'",
                     "set the first dimension of input_shape to 1")

    # -- calibration and node placement --------------------------------------------------------
    def check_calibration(self) -> None:
        c = self.vals["calibration_parameters"]
        if "max_percentile" not in self.given["calibration_parameters"] \
                and c["calibration_type"] == "percentile":
            c["max_percentile"] = S.PERCENTILE_DEFAULT
        opts = c["optimization"]
        if "set_model_output_int8" in opts and "set_model_output_int16" in opts:
            fail("calibration_parameters.optimization",
                 "set_model_output_int8 and set_model_output_int16 contradict each other",
                 "keep one of them")
        both = [n for n in c["run_on_bpu"] if n in c["run_on_cpu"]]
        if both:
            fail("calibration_parameters.run_on_bpu",
                 f"'{both[0]}' is also in run_on_cpu", "list each node in only one of them")

    def merge_node_info(self) -> dict[str, dict[str, str | None]]:
        m = self.vals["model_parameters"]
        c = self.vals["calibration_parameters"]
        merged: dict[str, dict[str, str | None]] = {}
        for node, entry in m["set_node_data_type"].items():
            merged[node] = dict(entry)
        for key, on in (("run_on_cpu", "CPU"), ("run_on_bpu", "BPU")):
            for node in c[key]:
                entry = merged.setdefault(node, _empty_node_entry())
                _merge_node("calibration_parameters." + key, node, entry, {"ON": on},
                            "set_node_data_type")
        for node, entry in m["node_info"].items():
            base = merged.setdefault(node, _empty_node_entry())
            where = []
            if node in c["run_on_cpu"]:
                where.append("calibration_parameters.run_on_cpu")
            if node in c["run_on_bpu"]:
                where.append("calibration_parameters.run_on_bpu")
            if node in m["set_node_data_type"]:
                where.append("model_parameters.set_node_data_type")
            _merge_node("model_parameters.node_info", node, base, entry,
                        " / ".join(where) or "another setting")
        return merged

    # -- compiler ------------------------------------------------------------------------------
    def check_compiler(self, specs: list[InputSpec]) -> dict[str, str]:
        comp = self.vals["compiler_parameters"]
        fc = comp["max_time_per_fc"]
        if 0 < fc < 1000:
            fail("compiler_parameters.max_time_per_fc",
                 f"expected 0 (no split) or at least 1000 microseconds, got {fc}",
                 "use 0 or a value of 1000 or more")
        given = comp["input_source"]
        names = [s.name for s in specs if s.name is not None]
        default = given.get("_default_value")
        for key in given:
            if key == "_default_value":
                continue
            if names and key not in names:
                guess = closest(key, names)
                hint = f"did you mean '{guess}'? " if guess else ""
                fail(f"compiler_parameters.input_source.{key}", "no input of that name",
                     f"{hint}use names from input_parameters.input_name: {', '.join(names)}")
        unnamed = [v for k, v in given.items() if k != "_default_value"]
        resolved: dict[str, str] = {}
        for spec in specs:
            if spec.name is not None and spec.name in given:
                src = given[spec.name]
            elif spec.name is None and len(unnamed) == 1:
                src = unnamed[0]
            elif default is not None:
                src = default
            else:
                src = "pyramid" if spec.type_rt in ("nv12", "gray") else "ddr"
            if src in ("pyramid", "resizer") and spec.type_rt not in ("nv12", "gray"):
                key = spec.name if spec.name in given else "_default_value"
                fail(f"compiler_parameters.input_source.{key}",
                     f"{src} delivers nv12/gray images, but input_type_rt of {spec.label} is "
                     f"{spec.type_rt}", "use ddr for this input")
            spec.source = src
            resolved[spec.name if spec.name is not None else "_default_value"] = src
        if not specs:
            resolved = dict(given)
        return resolved

    # -- keys hbtool reads but cannot honour ----------------------------------------------------
    def refuse_unhonoured(self) -> None:
        """Keys whose non-default values no stage would act on: refused, never silently ignored."""
        for group in S.RESERVED_GROUPS:
            table, _ = GROUPS[group]
            for key in sorted(self.given[group]):
                default = table[key].default
                if table[key].kind == "path" and default is not None:
                    default = read_path(f"{group}.{key}", default, self.base)
                if group == "debug_parameters" and key == "report_dir":
                    default = Path(self.vals["model_parameters"]["working_dir"]) / "debug"
                if self.vals[group][key] != default:
                    fail(f"{group}.{key}", S.RESERVED_GROUPS[group][0], S.RESERVED_GROUPS[group][1])
        iv = self.vals["input_parameters"]
        if iv["input_batch"] != 1:
            fail("input_parameters.input_batch",
                 f"input_batch {iv['input_batch']}: hbtool compiles the batch of the model's input "
                 "shape and cannot re-batch the compiled model",
                 "export the model with the batch you want (input_shape Nx...) and calibrate on "
                 "samples of that shape, or remove input_batch")
        if iv["separate_batch"]:
            fail("input_parameters.separate_batch",
                 "separate_batch needs input_batch > 1, which hbtool does not support",
                 "remove separate_batch")
        fc = self.vals["compiler_parameters"]["max_time_per_fc"]
        if fc:
            fail("compiler_parameters.max_time_per_fc",
                 f"{fc}: hbtool does not split the program into preemptible function calls",
                 "remove max_time_per_fc (or set 0); the whole model runs as one call")

    # -- gates ---------------------------------------------------------------------------------
    def check_gates(self) -> None:
        """The accuracy gates read held-out samples: asking for one without data_dir is an error now,
        not after minutes of compiling."""
        g = self.vals["gate_parameters"]
        if g["data_dir"] is not None:
            return
        for key in ("min_output_cosine", "min_metric", "max_metric_drop", "bit_exact_samples"):
            if g[key] is not None:
                fail(f"gate_parameters.{key}", "this gate measures held-out samples, and gate_parameters.data_dir "
                     "is not set", "set gate_parameters.data_dir to a folder of held-out samples (same format as "
                     "cal_data_dir), not the calibration set")

    # -- assemble ------------------------------------------------------------------------------
    def build(self) -> HbConfig:
        self.read_plain_keys()
        self.refuse_unhonoured()
        self.check_model()
        specs = self.read_inputs()
        self.check_input_globals(specs)
        self.check_calibration()
        node_info = self.merge_node_info()
        input_source = self.check_compiler(specs)

        mv = self.vals["model_parameters"]
        model = ModelParams(**{**mv, "node_info": node_info})
        cv = self.vals["calibration_parameters"]
        calibration = CalibrationParams(
            cal_data_dir=[s.cal_data_dir for s in specs] if any(s.cal_data_dir for s in specs)
            else [],
            cal_data_type=[s.cal_data_type for s in specs], **cv)
        compiler = CompilerParams(**{**self.vals["compiler_parameters"],
                                     "input_source": input_source})
        qat = QatParams(**self.vals["qat_parameters"])
        dv = dict(self.vals["debug_parameters"])
        if dv["report_dir"] is None:
            dv["report_dir"] = model.working_dir / "debug"
        debug = DebugParams(**dv)
        gates = GateParams(**self.vals["gate_parameters"])
        self.check_gates()
        iv = self.vals["input_parameters"]
        cfg = HbConfig(model=model, inputs=specs, calibration=calibration, compiler=compiler,
                       qat=qat, debug=debug, gates=gates, input_batch=iv["input_batch"],
                       separate_batch=iv["separate_batch"], source=self.source,
                       base_dir=self.base)
        cfg.raw = to_raw(cfg)
        return cfg


# ----------------------------------------------------------------------------------------------
# the validated dict (defaults filled) for logs and artifacts
# ----------------------------------------------------------------------------------------------

def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def to_raw(cfg: HbConfig) -> dict[str, dict[str, Any]]:
    """The config as plain YAML/JSON data with every default filled in.

    Feeding it back to ``config_from_dict`` gives the same config.
    """
    raw: dict[str, dict[str, Any]] = {}
    objs = {"model_parameters": cfg.model, "calibration_parameters": cfg.calibration,
            "compiler_parameters": cfg.compiler, "qat_parameters": cfg.qat,
            "debug_parameters": cfg.debug, "gate_parameters": cfg.gates}
    for group, (table, _) in GROUPS.items():
        out: dict[str, Any] = {}
        for name, key in table.items():
            if key.unsupported is not None:
                continue
            if key.per_input:
                attr = INPUT_FIELDS[name]
                vals = [getattr(s, attr) for s in cfg.inputs]
                if name == "input_shape":
                    vals = [format_shape(v) if v is not None else None for v in vals]
                out[name] = _plain(vals)
            elif group == "input_parameters":
                out[name] = getattr(cfg, INPUT_GLOBAL_FIELDS[name])
            else:
                out[name] = _plain(getattr(objs[group], name))
        raw[group] = out
    return raw


def _input_key_path(key: str) -> str:
    """``group.key`` of a per-input key, for messages."""
    return f"{PER_INPUT_KEYS[key][0]}.{key}"


def _types_and_layouts(pre: str, type_train: str, type_rt: str, layout_train: str | None,
                       layout_rt_given: str | None) -> str | None:
    """Check the run-time type against the training type and the layouts; the run-time layout."""
    if type_rt not in S.TRAIN_TO_RT[type_train]:
        ok = ", ".join(S.TRAIN_TO_RT[type_train])
        fail(_input_key_path("input_type_rt"),
             f"{pre}input_type_train {type_train} cannot be fed as {type_rt} at run time",
             f"for input_type_train {type_train} use input_type_rt {ok}")
    if type_train != "featuremap" and layout_train is None:
        fail(_input_key_path("input_layout_train"),
             f"{pre}input_type_train {type_train} needs input_layout_train",
             "set input_layout_train to NCHW or NHWC, as the model's input is laid out")
    if layout_rt_given is not None and layout_train is None:
        fail(_input_key_path("input_layout_rt"), f"{pre}input_layout_rt needs input_layout_train too",
             "set input_layout_train, or remove input_layout_rt")
    if type_rt == "nv12":
        return None  # an nv12 buffer has its own fixed arrangement
    return layout_rt_given or layout_train


def _image_shape_channels(pre: str, shape: tuple[int, ...] | None, type_train: str, type_rt: str,
                          layout_train: str | None) -> int | None:
    """Check a laid-out input's shape (rank 4, the type's channel count, even sides for YUV); its channels."""
    is_image = type_train != "featuremap"
    if shape is not None and layout_train is not None and len(shape) != 4:
        why = f"input_type_train {type_train}" if is_image else f"layout {layout_train}"
        fail(_input_key_path("input_shape"),
             f"{pre}{why} needs a 4-D shape like 1x3x224x224, got '{format_shape(shape)}'",
             "give all four dimensions (N, C, H, W in the layout's order)")
    if shape is None or layout_train is None:
        return S.TYPE_CHANNELS[type_train] if is_image else None
    c_axis = 1 if layout_train == "NCHW" else 3
    channels = shape[c_axis]
    h, w = (shape[2], shape[3]) if layout_train == "NCHW" else (shape[1], shape[2])
    want_c = S.TYPE_CHANNELS.get(type_train)
    if want_c is not None and channels != want_c:
        fail(_input_key_path("input_shape"),
             f"{pre}{type_train} has {want_c} channel{'s' if want_c > 1 else ''}, but "
             f"dimension {c_axis} of '{format_shape(shape)}' ({layout_train}) is {channels}",
             "check input_shape and input_layout_train against the model's input")
    if (type_rt in ("nv12", "yuv444", "yuv444_128") or type_train == "yuv444") and (h % 2 or w % 2):
        fail(_input_key_path("input_shape"),
             f"{pre}{type_rt} input needs an even height and width, got {h}x{w}",
             "resize the model input to even height and width")
    return channels


def _preprocessing_values(pre: str, norm: str, mean: tuple[float, ...] | None, scale: tuple[float, ...] | None,
                          channels: int | None) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    """``mean_value`` / ``scale_value`` checked against ``norm_type`` and the channel count."""
    needs_mean = norm in ("data_mean", "data_mean_and_scale")
    needs_scale = norm in ("data_scale", "data_mean_and_scale")
    # Horizon accepts a mean of 0 (or a scale of 1) that the norm_type does not use: it
    # changes nothing, so it is dropped rather than refused.
    if not needs_mean and mean is not None and all(v == 0 for v in mean):
        log.info("%smean_value %s is not used by norm_type %s and changes nothing: dropped",
                 pre, " ".join(f"{v:g}" for v in mean), norm)
        mean = None
    if not needs_scale and scale is not None and all(v == 1 for v in scale):
        log.info("%sscale_value %s is not used by norm_type %s and changes nothing: dropped",
                 pre, " ".join(f"{v:g}" for v in scale), norm)
        scale = None
    for key, values, needed in (("mean_value", mean, needs_mean), ("scale_value", scale, needs_scale)):
        if needed and values is None:
            fail(_input_key_path(key), f"{pre}norm_type {norm} needs {key}",
                 f"give {key} (one number or one per channel), or change norm_type")
        if not needed and values is not None:
            fail(_input_key_path(key), f"{pre}norm_type {norm} does not use {key}, so it would be ignored",
                 f"remove {key} (None for this input), or set norm_type to one that uses it")
        if values is None or len(values) == 1:
            continue
        if channels is None:
            fail(_input_key_path(key), f"{pre}{len(values)} values given but the channel count is "
                                       "unknown (featuremap without input_layout_train and input_shape)",
                 "give a single number, or set input_layout_train and input_shape")
        if len(values) != channels:
            fail(_input_key_path(key), f"{pre}{len(values)} values given but the input has {channels} "
                                       "channels",
                 f"give 1 or {channels} values, separated by spaces")
    if scale is not None and any(v == 0 for v in scale):
        fail(_input_key_path("scale_value"), f"{pre}a scale of 0 erases the input",
             "use the inverse of the standard deviation, e.g. 0.0171 for std 58.4")
    return mean, scale
