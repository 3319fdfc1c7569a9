"""AtomicFileSet: files staged early (hbtool calibrate writes its models while the evaluation runs) reach their
targets only on commit, all together; leaving without a commit leaves every target as it was."""

from __future__ import annotations

import pytest

from hbtool.utils.atomic import AtomicFileSet, atomic_write_files


def _temporaries(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_staged_files_reach_their_targets_only_on_commit(tmp_path):
    old = tmp_path / "model.onnx"
    old.write_bytes(b"old")
    with AtomicFileSet() as files:
        files.stage(old, b"new")
        files.stage(tmp_path / "sub" / "info.json", b"{}")
        assert old.read_bytes() == b"old" and not (tmp_path / "sub" / "info.json").exists()
        assert old in files and tmp_path / "other" not in files
        assert len(_temporaries(tmp_path)) == 1 and len(_temporaries(tmp_path / "sub")) == 1
        files.commit()
    assert old.read_bytes() == b"new" and (tmp_path / "sub" / "info.json").read_bytes() == b"{}"
    assert _temporaries(tmp_path) == [] and _temporaries(tmp_path / "sub") == []


def test_leaving_without_commit_keeps_the_targets_and_removes_the_temporaries(tmp_path):
    old = tmp_path / "model.onnx"
    old.write_bytes(b"old")
    with pytest.raises(RuntimeError), AtomicFileSet() as files:
        files.stage(old, b"new")
        files.stage(tmp_path / "made" / "deeper" / "log", b"text")
        raise RuntimeError("the calibration failed after the models were staged")
    assert old.read_bytes() == b"old"
    assert _temporaries(tmp_path) == [] and not (tmp_path / "made").exists()   # the folders it made are gone too


def test_atomic_write_files_is_a_staged_set_committed(tmp_path):
    atomic_write_files({tmp_path / "a": b"1", tmp_path / "b" / "c": b"2"})
    assert (tmp_path / "a").read_bytes() == b"1" and (tmp_path / "b" / "c").read_bytes() == b"2"
    assert _temporaries(tmp_path) == []
